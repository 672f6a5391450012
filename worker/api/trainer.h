// pshard's C++ API: drive the sharded optimizer from a training loop of your
// own. A thin layer over Session (session.h), the code the C API and the
// Python package run too. Each rank keeps the full parameters but holds optimizer state (SGD
// momentum, Adam moments) only for the gradient buckets it owns; every step
// each bucket's gradient is reduced to its owner, the owner steps it, and the
// owner broadcasts the updated parameters — overlapped with your backward
// pass if you hand gradients over as they become final.
//
//   // One per rank. In a `program` job (the rank's agent set the
//   // environment; main() reads it):
//   ASSIGN_OR_RETURN(SessionEnvironment env,
//                    ParseSessionEnvironment([](const char* n) {
//                      return std::getenv(n); }));
//   TrainerOptions options;
//   options.optimizer.set_kind(v1::OptimizerSpec::ADAM);
//   ASSIGN_OR_RETURN(auto trainer,
//                    Trainer::Open(env, {{"w", {64, 32}, 2048},
//                                        {"b", {64}, 64}}, options));
//   // (Trainer::Create(comm, ...) instead runs over a communicator you
//   // joined yourself: the mode of tests and of examples/cpp_api's threads.)
//   InitWeights(trainer->parameter(0));   // same values on every rank
//   for (int step = 1; step <= steps; ++step) {
//     // backward, last layer first:
//     ComputeGradB(trainer->gradient(1));
//     RETURN_IF_ERROR(trainer->GradientReady(1));   // bucket may start now
//     ComputeGradW(trainer->gradient(0));
//     RETURN_IF_ERROR(trainer->GradientReady(0));
//     RETURN_IF_ERROR(trainer->FinishStep());       // parameters updated
//   }
//
// Rules:
//  - Every rank registers the same parameters (names, sizes, order), writes
//    the same initial values, and calls GradientReady for every parameter
//    once per step, then FinishStep.
//  - Gradients are this rank's own (e.g. of its mean loss); the trainer
//    averages them over ranks, as DDP does.
//  - parameter(i) and gradient(i) point into flat bucket buffers. The first
//    FinishStep may re-pack the buckets if your gradients became ready in
//    another order than the reverse of registration, so fetch the spans again
//    after it (they are stable from then on).
//  - The first step already updates the parameters: the bucket layout and
//    its owners are settled inside the first FinishStep.
//  - After the last step, call Close() (a final barrier, so that no rank
//    closes its connections while a peer is still receiving the last
//    broadcasts).
//  - Any error (a peer gone, a timeout) leaves the communicator aborted: end
//    the run. With Create, destroy your communicator before the Trainer (an
//    aborted transport may still hold the Trainer's buffers until it is
//    destroyed); Open's trainer owns its communicator and does that itself.
#ifndef PSHARD_WORKER_API_TRAINER_H_
#define PSHARD_WORKER_API_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/api/session.h"
#include "worker/comm/communicator.h"
#include "worker/hook/zero_hook.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

class AssignmentClient;  // worker/runtime/assignment_client.h

struct TrainerOptions {
  // The optimizer, with PyTorch's names and defaults; param_groups select
  // parameters by name (globs) for their own hyper-parameters.
  v1::OptimizerSpec optimizer;
  // Target bucket size, as DDP's bucket_cap_mb.
  double bucket_cap_mb = 25;
  v1::JobSpec::CommMode comm_mode = v1::JobSpec::REDUCE_BROADCAST;
  // Mixed precision (Session::SetPrecision): bf16 parameters and/or
  // gradients, fp32 master weights at the owners. Unset: the environment's
  // (Open: the job spec's precision) or fp32 (Create).
  std::optional<MixedPrecision> precision;
  // Create only (Open takes these from the environment):
  // How buckets are spread over ranks when they are computed locally
  // (identically on every rank; see assignment_client).
  v1::JobSpec::AssignmentPolicy assignment_policy = v1::JobSpec::BALANCED;
  // Where the buckets' owners come from. nullptr (the default): computed on
  // every rank with assignment_policy, a mode for tests and the threads
  // example, where no coordinator runs. Otherwise the coordinator's
  // layout/assignment protocol for this rank of a job attempt
  // (worker/runtime/assignment_client.h, as pshard-worker uses it): the
  // first FinishStep reports the observed layout and waits up to `timeout`
  // for the published owners. Its rank and world size must be the
  // communicator's; it must outlive the trainer.
  AssignmentClient* assignment_client = nullptr;
  // Deadline of every wait inside a step.
  absl::Duration timeout = absl::Seconds(60);
};

class Trainer {
 public:
  // A rank of a program job (or of the local test mode): joins the
  // communicator as `env` says (Session::Open), then registers `params`.
  // Errors: Session::Open's, then Create's argument errors.
  static absl::StatusOr<std::unique_ptr<Trainer>> Open(
      const SessionEnvironment& env, std::vector<ParameterInfo> params,
      const TrainerOptions& options);

  // Over `comm` (this rank's, joined with every other rank; it must outlive
  // the trainer). `params` lists the model's parameters in registration
  // (forward) order; `shape` may be empty (then {numel}).
  // InvalidArgument: no parameters, an empty or unnamed parameter, duplicate
  // names, an invalid optimizer, or an assignment client of another rank or
  // world size.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      Communicator* comm, std::vector<ParameterInfo> params,
      const TrainerOptions& options);

  ~Trainer();

  int num_parameters() const { return session_->num_parameters(); }

  // Parameter i's values and its gradient buffer (see the rules above), as
  // fp32: empty when their dtype (options.precision) is not fp32.
  absl::Span<float> parameter(int i) { return session_->parameter(i); }
  absl::Span<float> gradient(int i) { return session_->gradient(i); }
  // The same in any dtype: numel elements of precision.param_dtype and of
  // precision.reduce_dtype (bf16: uint16_t, the upper half of a float).
  void* parameter_data(int i) { return session_->parameter_data(i); }
  void* gradient_data(int i) { return session_->gradient_data(i); }

  // Gradient i is final for this step. InvalidArgument for a bad index,
  // FailedPrecondition if already marked in this step.
  absl::Status GradientReady(int i) { return session_->GradientReady(i); }

  // Ends the step; on return every rank holds the updated parameters.
  absl::Status FinishStep() { return session_->FinishStep(); }

  // Steps finished so far.
  int64_t step() const { return session_->steps_finished(); }

  // After the first step: buckets and the ones this rank owns.
  int num_buckets() const { return session_->num_buckets(); }
  std::vector<int> owned_buckets() const { return session_->owned_buckets(); }
  // Optimizer state held by this rank, in bytes (about 1/world of the total).
  int64_t optimizer_state_bytes() const {
    return session_->optimizer_state_bytes();
  }

  // Checkpoints of this rank's shard (Session's): after the first step, the
  // state of the parameters whose buckets this rank owns; before the first
  // step of a new trainer (same rank, world size, parameters and bucket
  // size; or every rank's together at any of them), the state to resume
  // from. Under SHARDED entries are slices (ParameterOptimizerState's
  // offset).
  absl::StatusOr<std::vector<ParameterOptimizerState>> ExportOptimizerState();
  absl::Status LoadOptimizerState(std::vector<ParameterOptimizerState> state);

  // Progress (rank 0's goes to the coordinator in a program job), the loss
  // averaged over ranks, and the end: Session's.
  Session& session() { return *session_; }
  absl::Status Close() { return session_->Close(); }

 private:
  explicit Trainer(std::unique_ptr<Session> session);
  // Configures the session with `options` and registers `params`.
  static absl::StatusOr<std::unique_ptr<Trainer>> Configure(
      std::unique_ptr<Session> session, std::vector<ParameterInfo> params,
      const TrainerOptions& options);

  std::unique_ptr<Session> session_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_API_TRAINER_H_
