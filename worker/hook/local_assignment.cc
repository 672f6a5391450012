#include "worker/hook/local_assignment.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace pshard::worker {
namespace {

int64_t MaxLoad(absl::Span<const int64_t> bytes, const std::vector<int>& owners,
                int world_size) {
  std::vector<int64_t> load(world_size, 0);
  for (size_t b = 0; b < bytes.size(); ++b) load[owners[b]] += bytes[b];
  return load.empty() ? 0 : *std::max_element(load.begin(), load.end());
}

}  // namespace

absl::StatusOr<std::vector<int>> LocalAssignBuckets(
    v1::JobSpec::AssignmentPolicy policy,
    absl::Span<const int64_t> bucket_bytes, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size must be >= 1, got ", world_size));
  }
  for (size_t b = 0; b < bucket_bytes.size(); ++b) {
    if (bucket_bytes[b] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", b, " has negative size ", bucket_bytes[b]));
    }
  }
  const int n = static_cast<int>(bucket_bytes.size());
  std::vector<int> round_robin(n);
  for (int b = 0; b < n; ++b) round_robin[b] = b % world_size;
  if (policy == v1::JobSpec::ROUND_ROBIN) return round_robin;

  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return bucket_bytes[a] > bucket_bytes[b];
  });
  std::vector<int64_t> load(world_size, 0);
  std::vector<int> owners(n, 0);
  for (int b : order) {
    int best = 0;
    for (int r = 1; r < world_size; ++r) {
      if (load[r] < load[best]) best = r;
    }
    owners[b] = best;
    load[best] += bucket_bytes[b];
  }
  if (MaxLoad(bucket_bytes, owners, world_size) >
      MaxLoad(bucket_bytes, round_robin, world_size)) {
    return round_robin;
  }
  return owners;
}

}  // namespace pshard::worker
