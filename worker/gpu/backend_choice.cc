#include "worker/gpu/backend_choice.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pshard::worker {

absl::StatusOr<WorkerDevice> ResolveWorkerDevice(
    absl::string_view flag, int cuda_device_count,
    absl::string_view why_no_cuda) {
  WorkerDevice device;
  if (flag == "cpu") return device;
  if (flag == "auto") {
    if (cuda_device_count > 0) {
      device.cuda_device = 0;
      device.name = "cuda:0";
    }
    return device;
  }
  absl::string_view index = flag;
  int n = -1;
  if (!absl::ConsumePrefix(&index, "cuda:") || index.empty() ||
      !absl::SimpleAtoi(index, &n) || n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device must be cpu, auto or cuda:N (N >= 0), got \"", flag, "\""));
  }
  if (n >= cuda_device_count) {
    return absl::UnavailableError(
        cuda_device_count == 0
            ? absl::StrCat("--device=", flag, ": no CUDA device (", why_no_cuda,
                           ")")
            : absl::StrCat("--device=", flag, ": only ", cuda_device_count,
                           " CUDA device(s) present"));
  }
  device.cuda_device = n;
  device.name = absl::StrCat("cuda:", n);
  return device;
}

absl::StatusOr<CommBackend> ChooseBackend(v1::JobSpec::Backend requested,
                                          const WorkerDevice& device) {
  switch (requested) {
    case v1::JobSpec::GLOO:
      return CommBackend::kGloo;
    case v1::JobSpec::NCCL:
      if (!device.is_gpu()) {
        return absl::FailedPreconditionError(
            "job asks for the NCCL backend, but this worker runs on the CPU "
            "(start it with --device=auto or --device=cuda:N on a GPU host)");
      }
      return CommBackend::kNccl;
    case v1::JobSpec::AUTO:
    case v1::JobSpec::BACKEND_UNSPECIFIED:
    default:
      return device.is_gpu() ? CommBackend::kNccl : CommBackend::kGloo;
  }
}

}  // namespace pshard::worker
