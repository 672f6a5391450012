#include "shard/layout.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "shard/assignment.h"

namespace pshard {
namespace shard {

int64_t DtypeSize(absl::string_view dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

absl::Status ValidateLayout(const Layout& layout, const LayoutLimits& limits) {
  if (layout.empty()) {
    return absl::InvalidArgumentError("buckets: at least one bucket required");
  }
  if (layout.size() > limits.max_buckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("buckets: at most ", limits.max_buckets,
                     " buckets allowed, got ", layout.size()));
  }
  int64_t total_parameters = 0;
  // Where each name was first seen: a parameter lives in one bucket, once.
  absl::flat_hash_map<absl::string_view, std::pair<int, int>> seen;
  for (int i = 0; i < layout.size(); ++i) {
    const v1::BucketLayout& bucket = layout[i];
    if (bucket.index() != i) {
      return absl::InvalidArgumentError(
          absl::StrCat("buckets[", i, "].index: must be ", i, " (buckets in "
                       "index order), got ", bucket.index()));
    }
    if (bucket.parameters().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("buckets[", i, "].parameters: bucket is empty"));
    }
    total_parameters += bucket.parameters_size();
    if (total_parameters > limits.max_parameters) {
      return absl::InvalidArgumentError(
          absl::StrCat("buckets: more than ", limits.max_parameters,
                       " parameters in total"));
    }
    for (int j = 0; j < bucket.parameters_size(); ++j) {
      const v1::BucketParameter& p = bucket.parameters(j);
      auto where = [i, j] {
        return absl::StrCat("buckets[", i, "].parameters[", j, "]");
      };
      if (p.name().empty() ||
          p.name().size() > static_cast<size_t>(limits.max_name_length)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ".name: must be 1..", limits.max_name_length,
                         " characters, got ", p.name().size()));
      }
      if (p.num_elements() < 1 ||
          p.num_elements() > limits.max_parameter_elements) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ".num_elements: must be in 1..",
            limits.max_parameter_elements, ", got ", p.num_elements()));
      }
      if (auto [first, added] = seen.try_emplace(p.name(), i, j); !added) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ".name: \"", p.name().substr(0, 64),
            "\" is already buckets[", first->second.first, "].parameters[",
            first->second.second, "]: parameter names must be unique"));
      }
      if (DtypeSize(p.dtype()) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ".dtype: must be F32, BF16 or F16, got \"",
                         p.dtype().substr(0, 16), "\""));
      }
    }
  }
  return absl::OkStatus();
}

std::optional<LayoutDifference> CompareLayouts(const Layout& a,
                                               const Layout& b) {
  const int n = std::min(a.size(), b.size());
  for (int i = 0; i < n; ++i) {
    const auto& pa = a[i].parameters();
    const auto& pb = b[i].parameters();
    if (pa.size() != pb.size()) {
      return LayoutDifference{
          i, absl::StrCat(pb.size(), " parameters instead of ", pa.size())};
    }
    for (int j = 0; j < pa.size(); ++j) {
      if (pa[j].name() != pb[j].name()) {
        return LayoutDifference{
            i, absl::StrCat("parameter ", j, " is \"", pb[j].name(),
                            "\" instead of \"", pa[j].name(), "\"")};
      }
      if (pa[j].num_elements() != pb[j].num_elements()) {
        return LayoutDifference{
            i, absl::StrCat("parameter \"", pb[j].name(), "\" has ",
                            pb[j].num_elements(), " elements instead of ",
                            pa[j].num_elements())};
      }
      if (pa[j].dtype() != pb[j].dtype()) {
        return LayoutDifference{
            i, absl::StrCat("parameter \"", pb[j].name(), "\" has dtype ",
                            pb[j].dtype(), " instead of ", pa[j].dtype())};
      }
    }
  }
  if (a.size() != b.size()) {
    return LayoutDifference{
        n, absl::StrCat(b.size(), " buckets instead of ", a.size())};
  }
  return std::nullopt;
}

std::vector<int64_t> BucketBytes(const Layout& layout) {
  std::vector<int64_t> bytes;
  bytes.reserve(layout.size());
  for (const v1::BucketLayout& bucket : layout) {
    int64_t b = 0;
    for (const v1::BucketParameter& p : bucket.parameters()) {
      b += p.num_elements() * DtypeSize(p.dtype());
    }
    bytes.push_back(b);
  }
  return bytes;
}

namespace {

// Rank r's range of `bucket` under SHARDED, as published: its bytes and
// the parameters it touches.
void FillShardRanges(const v1::BucketLayout& bucket, int64_t num_elements,
                     const google::protobuf::RepeatedPtrField<v1::JobMember>&
                         members,
                     v1::BucketAssignment& out) {
  const std::vector<ElementRange> ranges =
      ShardRanges(num_elements, members.size());
  for (int r = 0; r < members.size(); ++r) {
    v1::ShardRange* range = out.add_ranges();
    range->set_owner_rank(r);
    range->set_owner_worker_id(members.Get(r).worker_id());
    range->set_begin_element(ranges[r].begin);
    range->set_end_element(ranges[r].end);
    int64_t offset = 0;  // of the parameter in the bucket
    int64_t bytes = 0;
    for (const v1::BucketParameter& p : bucket.parameters()) {
      const int64_t begin = std::max(offset, ranges[r].begin);
      const int64_t end = std::min(offset + p.num_elements(), ranges[r].end);
      if (begin < end) {
        bytes += (end - begin) * DtypeSize(p.dtype());
        range->add_parameter_names(p.name());
      }
      offset += p.num_elements();
    }
    range->set_bytes(bytes);
  }
}

}  // namespace

absl::StatusOr<v1::ShardAssignment> BuildShardAssignment(
    absl::string_view job_id, int64_t epoch,
    v1::JobSpec::AssignmentPolicy policy, const Layout& layout,
    const google::protobuf::RepeatedPtrField<v1::JobMember>& members) {
  if (members.empty()) {
    return absl::InvalidArgumentError("assignment needs at least one rank");
  }
  const int world_size = static_cast<int>(members.size());
  const std::vector<int64_t> bytes = BucketBytes(layout);
  ASSIGN_OR_RETURN(std::vector<int> owners,
                   AssignBuckets(policy, bytes, world_size));
  v1::ShardAssignment out;
  out.set_job_id(std::string(job_id));
  out.set_epoch(epoch);
  out.set_policy(policy == v1::JobSpec::ASSIGNMENT_POLICY_UNSPECIFIED
                     ? v1::JobSpec::BALANCED
                     : policy);
  std::vector<int64_t> owned(world_size, 0);
  std::vector<int64_t> owned_elements(world_size, 0);
  std::vector<int> owned_buckets(world_size, 0);
  int64_t total = 0;
  for (int i = 0; i < layout.size(); ++i) {
    v1::BucketAssignment* b = out.add_buckets();
    b->set_index(i);
    b->set_bytes(bytes[i]);
    int64_t elements = 0;
    for (const v1::BucketParameter& p : layout[i].parameters()) {
      elements += p.num_elements();
      b->add_parameter_names(p.name());
      if (b->dtype().empty()) {
        b->set_dtype(p.dtype());
      } else if (b->dtype() != p.dtype()) {
        b->set_dtype("MIXED");
      }
    }
    b->set_num_elements(elements);
    b->set_owner_rank(owners[i]);
    total += bytes[i];
    if (owners[i] == kEveryRank) {
      FillShardRanges(layout[i], elements, members, *b);
      for (const v1::ShardRange& range : b->ranges()) {
        const int r = range.owner_rank();
        owned[r] += range.bytes();
        owned_elements[r] += range.end_element() - range.begin_element();
        if (range.end_element() > range.begin_element()) ++owned_buckets[r];
      }
      continue;
    }
    b->set_owner_worker_id(members.Get(owners[i]).worker_id());
    owned[owners[i]] += bytes[i];
    owned_elements[owners[i]] += elements;
    ++owned_buckets[owners[i]];
  }
  for (int r = 0; r < world_size; ++r) {
    v1::RankShard* rank = out.add_ranks();
    rank->set_rank(r);
    rank->set_worker_id(members.Get(r).worker_id());
    rank->set_owned_bytes(owned[r]);
    rank->set_owned_elements(owned_elements[r]);
    rank->set_num_buckets(owned_buckets[r]);
  }
  out.set_imbalance(Imbalance(owned));
  out.set_total_bytes(total);
  return out;
}

v1::ShardAssignment OwnersView(const v1::ShardAssignment& full) {
  v1::ShardAssignment out;
  out.set_job_id(full.job_id());
  out.set_epoch(full.epoch());
  out.set_policy(full.policy());
  out.set_imbalance(full.imbalance());
  out.set_total_bytes(full.total_bytes());
  out.mutable_buckets()->Reserve(full.buckets_size());
  for (const v1::BucketAssignment& b : full.buckets()) {
    v1::BucketAssignment* o = out.add_buckets();
    o->set_index(b.index());
    o->set_owner_rank(b.owner_rank());
  }
  return out;
}

absl::StatusOr<std::vector<int>> DecodeOwners(
    const v1::ShardAssignment& assignment, int num_buckets, int world_size) {
  // Every owner is kEveryRank under SHARDED and a rank otherwise.
  const bool sharded = assignment.policy() == v1::JobSpec::SHARDED;
  constexpr int kUnset = -2;
  static_assert(kUnset != kEveryRank);
  std::vector<int> owners(num_buckets, kUnset);
  for (const v1::BucketAssignment& b : assignment.buckets()) {
    if (b.index() < 0 || b.index() >= num_buckets ||
        owners[b.index()] != kUnset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "assignment names bucket ", b.index(), " twice or out of range (",
          num_buckets, " buckets)"));
    }
    const bool valid = sharded ? b.owner_rank() == kEveryRank
                               : b.owner_rank() >= 0 &&
                                     b.owner_rank() < world_size;
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "assignment gives bucket ", b.index(), " to rank ", b.owner_rank(),
          " of a ", world_size, "-rank job",
          sharded ? " under SHARDED (every bucket must be owner -1)" : ""));
    }
    owners[b.index()] = b.owner_rank();
  }
  for (int i = 0; i < num_buckets; ++i) {
    if (owners[i] == kUnset) {
      return absl::InvalidArgumentError(
          absl::StrCat("assignment has no owner for bucket ", i, " (",
                       num_buckets, " buckets)"));
    }
  }
  return owners;
}

}  // namespace shard
}  // namespace pshard
