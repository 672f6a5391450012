// StepEngine: what the job runner needs from a backend to run one rank of a
// job, step by step. Two engines implement it: CpuJob (worker/runtime/
// cpu_job.h: ZeroHook + Gloo) and GpuJob (worker/gpu/gpu_job.h: GpuZeroHook
// + NCCL); CreateStepEngine (engine_factory.h) picks one from the job's
// backend and the worker's device. The runner's control flow is the same for
// both:
//
//   ASSIGN_OR_RETURN(auto engine, CreateStepEngine(spec, options, kv, provider));
//   // publish &engine->communicator() so that Abort() can reach it
//   for (step = 1..N) {
//     ASSIGN_OR_RETURN(double loss, engine->RunStep(step));
//     if (reporting) ASSIGN_OR_RETURN(loss, engine->AverageLoss(loss));
//   }
//   RETURN_IF_ERROR(engine->FinalBarrier());
//   ASSIGN_OR_RETURN(auto params, engine->DownloadParameters());  // output
//
// Collective order: AverageLoss and FinalBarrier are collectives. Every rank
// calls them at the same points (the same steps, after the same RunStep), as
// every rank runs the same spec.
#ifndef PSHARD_WORKER_RUNTIME_STEP_ENGINE_H_
#define PSHARD_WORKER_RUNTIME_STEP_ENGINE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/hook/zero_hook.h"
#include "worker/runtime/rank_model.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

// A RankModel too: checkpoints write from and resume into it.
class StepEngine : public RankModel {
 public:

  // Step `step` (1-based): the workload's forward/backward, its gradients
  // handed to the ZeRO hook as they become final (reduce -> owner's step ->
  // broadcast per bucket), and the hook's FinishStep. The first step also
  // settles the bucket layout and its assignment (the AssignmentProvider).
  // Returns this rank's loss (NaN for workloads without one). Errors: the
  // workload's, the hook's (a peer gone, DeadlineExceeded); afterwards the
  // communicator is aborted.
  virtual absl::StatusOr<double> RunStep(int64_t step) = 0;

  // The loss to report for a step whose RunStep returned `loss` on this
  // rank: the average over ranks where the engine can reduce a host value
  // (CpuJob: an all-reduce over Gloo when world > 1), this rank's own loss
  // where it cannot (GpuJob: the NCCL communicator reduces device memory
  // only; the runner reports rank 0's). A collective on engines that
  // reduce: every rank calls it at the same steps. Errors: the collective's.
  virtual absl::StatusOr<double> AverageLoss(double loss) = 0;

  // After the last step, before the engine is destroyed: waits until every
  // rank got there, so that nobody tears down the transport while a peer may
  // still be receiving the last broadcasts from it. A collective, bounded by
  // the job's collective timeout. Errors: the barrier's (DeadlineExceeded, a
  // peer gone).
  virtual absl::Status FinalBarrier() = 0;

  // This rank's communicator: for Abort() (from any thread, while the engine
  // lives) and bytes_sent(). Not for collectives of the caller's own: those
  // are the engine's operations above.
  virtual Communicator& communicator() = 0;

  virtual const Workload& workload() const = 0;
  const std::vector<ParameterInfo>& parameters() const final {
    return workload().parameters();
  }

  // Parameter `index`'s values (CopyParameterToHost), in a new vector.
  absl::StatusOr<std::vector<float>> DownloadParameter(int index) {
    std::vector<float> out(workload().parameters()[index].numel);
    absl::Status copied = CopyParameterToHost(index, out.data());
    if (!copied.ok()) return copied;
    return out;
  }

  // Every parameter's values on the host, in workload().parameters() order.
  absl::StatusOr<std::vector<std::vector<float>>> DownloadParameters() {
    std::vector<std::vector<float>> out;
    const int count = static_cast<int>(workload().parameters().size());
    out.reserve(count);
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<std::vector<float>> values = DownloadParameter(i);
      if (!values.ok()) return values.status();
      out.push_back(*std::move(values));
    }
    return out;
  }
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_STEP_ENGINE_H_
