#include "worker/comm/communicator.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/comm/work_impl.h"

namespace pshard::worker {

absl::Status CheckCollectiveArgs(const void* data, int64_t count, int root,
                                 int world_size) {
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative element count ", count));
  }
  if (root < 0 || root >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "root rank ", root, " is outside [0, ", world_size, ")"));
  }
  if (count > 0 && data == nullptr) {
    return absl::InvalidArgumentError("null buffer with a non-zero count");
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> Communicator::IssueGroup(
    CollectiveKind kind, absl::Span<const CollectiveSegment> segments,
    DataType dtype) {
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(segments.size());
  for (const CollectiveSegment& s : segments) {
    switch (kind) {
      case CollectiveKind::kAllReduce:
        works.push_back(AllReduce(s.data, s.count, dtype));
        break;
      case CollectiveKind::kReduceMean:
        works.push_back(ReduceMean(s.data, s.count, dtype, s.root));
        break;
      case CollectiveKind::kBroadcast:
        works.push_back(Broadcast(s.data, s.count, dtype, s.root));
        break;
    }
  }
  return AllOf(std::move(works));
}

}  // namespace pshard::worker
