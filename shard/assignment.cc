#include "shard/assignment.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pshard {
namespace shard {
namespace {

std::vector<int> RoundRobin(size_t num_buckets, int world_size) {
  std::vector<int> owners(num_buckets);
  for (size_t i = 0; i < num_buckets; ++i) {
    owners[i] = static_cast<int>(i % static_cast<size_t>(world_size));
  }
  return owners;
}

int64_t MaxLoad(const std::vector<int64_t>& load) {
  return load.empty() ? 0 : *std::max_element(load.begin(), load.end());
}

// Lowest rank among those with the largest load.
int MostLoaded(const std::vector<int64_t>& load) {
  return static_cast<int>(std::max_element(load.begin(), load.end()) -
                          load.begin());
}

// Deterministic local search: while some single move or pairwise swap
// between the most-loaded rank and another rank lowers the larger of the two
// loads involved (and so never raises the maximum), apply the best such move.
// Each accepted step strictly decreases the sum of squared loads, so the loop
// terminates; an iteration cap bounds the work anyway.
void Improve(absl::Span<const int64_t> bytes, int world_size,
             std::vector<int>& owners, std::vector<int64_t>& load) {
  const size_t n = bytes.size();
  const int kMaxIterations = 64;
  for (int iter = 0; iter < kMaxIterations; ++iter) {
    const int hi = MostLoaded(load);
    // Best improvement found: new max of the pair (hi, other), lower is
    // better; ties resolved by scan order (lower indices first).
    int64_t best_pair_max = load[hi];
    int best_a = -1;  // bucket leaving `hi`
    int best_b = -1;  // bucket entering `hi` (-1 for a plain move)
    int best_rank = -1;
    std::vector<std::vector<int>> by_rank(world_size);
    for (size_t i = 0; i < n; ++i) by_rank[owners[i]].push_back(i);
    for (int a : by_rank[hi]) {
      for (int r = 0; r < world_size; ++r) {
        if (r == hi) continue;
        // Move a: hi -> r.
        {
          const int64_t new_hi = load[hi] - bytes[a];
          const int64_t new_r = load[r] + bytes[a];
          const int64_t pair_max = std::max(new_hi, new_r);
          if (pair_max < best_pair_max) {
            best_pair_max = pair_max;
            best_a = a;
            best_b = -1;
            best_rank = r;
          }
        }
        // Swap a (hi) with b (r).
        for (int b : by_rank[r]) {
          if (bytes[b] >= bytes[a]) continue;
          const int64_t new_hi = load[hi] - bytes[a] + bytes[b];
          const int64_t new_r = load[r] + bytes[a] - bytes[b];
          const int64_t pair_max = std::max(new_hi, new_r);
          if (pair_max < best_pair_max) {
            best_pair_max = pair_max;
            best_a = a;
            best_b = b;
            best_rank = r;
          }
        }
      }
    }
    if (best_a < 0) return;
    load[hi] -= bytes[best_a];
    load[best_rank] += bytes[best_a];
    owners[best_a] = best_rank;
    if (best_b >= 0) {
      load[best_rank] -= bytes[best_b];
      load[hi] += bytes[best_b];
      owners[best_b] = hi;
    }
  }
}

std::vector<int> Balanced(absl::Span<const int64_t> bytes, int world_size) {
  const size_t n = bytes.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return bytes[a] > bytes[b]; });
  // Min-heap of (load, rank): the least-loaded rank, lowest rank on ties.
  using Entry = std::pair<int64_t, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int r = 0; r < world_size; ++r) heap.push({0, r});
  std::vector<int> owners(n, 0);
  std::vector<int64_t> load(world_size, 0);
  for (int b : order) {
    auto [l, r] = heap.top();
    heap.pop();
    owners[b] = r;
    load[r] = l + bytes[b];
    heap.push({load[r], r});
  }
  // One improvement step costs about n^2 / world_size; skip the pass where
  // that is large (many buckets per rank, where greedy is near-perfect anyway).
  if (static_cast<double>(n) * n / world_size <= 1e6) {
    Improve(bytes, world_size, owners, load);
  }
  std::vector<int> rr = RoundRobin(n, world_size);
  if (MaxLoad(OwnedBytes(bytes, rr, world_size)) < MaxLoad(load)) return rr;
  return owners;
}

}  // namespace

std::vector<ElementRange> ShardRanges(int64_t numel, int world_size) {
  // Whole units of kShardAlignElements (the last one may be short), dealt
  // out as evenly as they go: the last `extra` ranks get one more, so the
  // short unit goes to a rank with an extra one.
  const int64_t units = (numel + kShardAlignElements - 1) / kShardAlignElements;
  const int64_t base = units / world_size;
  const int64_t extra = units % world_size;
  std::vector<ElementRange> ranges(world_size);
  int64_t begin_unit = 0;
  for (int r = 0; r < world_size; ++r) {
    const int64_t end_unit =
        begin_unit + base + (r >= world_size - extra ? 1 : 0);
    ranges[r].begin = std::min(numel, begin_unit * kShardAlignElements);
    ranges[r].end = std::min(numel, end_unit * kShardAlignElements);
    begin_unit = end_unit;
  }
  return ranges;
}

absl::StatusOr<std::vector<int>> AssignBuckets(
    v1::JobSpec::AssignmentPolicy policy,
    absl::Span<const int64_t> bucket_bytes, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  for (size_t i = 0; i < bucket_bytes.size(); ++i) {
    if (bucket_bytes[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", i, " has a negative size: ", bucket_bytes[i]));
    }
  }
  switch (policy) {
    case v1::JobSpec::ROUND_ROBIN:
      return RoundRobin(bucket_bytes.size(), world_size);
    case v1::JobSpec::ASSIGNMENT_POLICY_UNSPECIFIED:
    case v1::JobSpec::BALANCED:
      return Balanced(bucket_bytes, world_size);
    case v1::JobSpec::SHARDED:
      return std::vector<int>(bucket_bytes.size(), kEveryRank);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown assignment policy ", static_cast<int>(policy)));
  }
}

std::vector<int64_t> OwnedBytes(absl::Span<const int64_t> bucket_bytes,
                                absl::Span<const int> owners, int world_size) {
  std::vector<int64_t> owned(std::max(world_size, 0), 0);
  for (size_t i = 0; i < bucket_bytes.size() && i < owners.size(); ++i) {
    if (owners[i] >= 0 && owners[i] < world_size) {
      owned[owners[i]] += bucket_bytes[i];
    }
  }
  return owned;
}

double Imbalance(absl::Span<const int64_t> owned_bytes) {
  if (owned_bytes.empty()) return 1.0;
  long double total = 0;
  int64_t max = 0;
  for (int64_t b : owned_bytes) {
    total += b;
    max = std::max(max, b);
  }
  if (total <= 0) return 1.0;
  const long double mean = total / owned_bytes.size();
  return static_cast<double>(max / mean);
}

}  // namespace shard
}  // namespace pshard
