#include "worker/comm/communicator.h"

#include "absl/strings/str_cat.h"

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

}  // namespace pshard::worker
