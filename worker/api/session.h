// Session: one rank of a training program of the user's own, as the C API
// (pshard.h) and the Python package see it. It joins the job's communicator,
// holds the configuration until the parameters are registered, and then
// drives a Trainer (trainer.h) — the C API is this class with its statuses
// turned into result codes.
//
//   SessionEnvironment ──Open──▶ configuring ──Prepare──▶ prepared ──Close
//                        (communicator joined)   (Trainer: buckets,
//                                                 owners at the 1st step)
//
// Two modes, chosen by the environment (ParseSessionEnvironment):
//  - coordinator (a `program` job's rank, started by its agent): rendezvous
//    through the coordinator's KV scoped by (job, epoch), the bucket owners
//    through AssignmentClient (as the built-in job runner), rank 0's progress
//    through ProgressReporter;
//  - local, for tests only: rendezvous through files in a directory
//    (FileKvStore), owners computed on every rank (LocalAssignmentProvider),
//    no progress sent.
//
// Thread-compatible; the C API serialises calls on one session.
#ifndef PSHARD_WORKER_API_SESSION_H_
#define PSHARD_WORKER_API_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/api/trainer.h"
#include "worker/comm/communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

class AssignmentClient;
class ControlPlane;
class ProgressReporter;

// Prefix of the communicator's rendezvous keys (the program contract).
inline constexpr char kProgramCommKeyPrefix[] = "pshard/program/comm/";
// Limits of RegisterParameter.
inline constexpr int kMaxParameterNameLength = 256;
inline constexpr int kMaxParameterDims = 16;

// What a rank learns from its environment (the agent ↔ program contract).
struct SessionEnvironment {
  // Non-empty: coordinator mode, with job_id, epoch and worker_id.
  std::string coordinator;
  std::string job_id;
  int64_t epoch = 0;
  std::string worker_id;
  // Local test mode: the rendezvous directory.
  std::string local_store;
  int rank = 0;
  int world_size = 1;
  // What this rank's communicator listens on and publishes.
  std::string hostname = "127.0.0.1";
  absl::Duration timeout = absl::Seconds(60);
};

// Reads the contract's variables through `getenv` (returns nullptr for an
// unset name; ::getenv in the C API). InvalidArgument names the variable:
// neither PSHARD_COORDINATOR nor PSHARD_LOCAL_STORE set, a required one
// missing, a number that does not parse or is out of range (rank outside
// [0, world), world outside [1, 4096], timeout not in (0, 86400] seconds).
absl::StatusOr<SessionEnvironment> ParseSessionEnvironment(
    const std::function<const char*(const char*)>& getenv);

class Session {
 public:
  // Joins the communicator (Gloo, host memory) of `env`'s job. Errors:
  // InvalidArgument for a bad environment; the rendezvous's
  // (DeadlineExceeded when the other ranks do not show up within
  // env.timeout — in coordinator mode "rank R (worker W) did not join the
  // job's communicator within T: did its program call pshard.init()?" —,
  // Unavailable when the coordinator is unreachable). In coordinator mode
  // a failure to join is also reported to the coordinator as this rank's
  // result (ReportResult), so that it is the job's reason and the other
  // ranks' programs are stopped.
  static absl::StatusOr<std::unique_ptr<Session>> Open(
      const SessionEnvironment& env, const Clock& clock = Clock::Real());

  ~Session();

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  bool local() const { return env_.coordinator.empty(); }

  // Configuration; FailedPrecondition after Prepare.
  // InvalidArgument names the field (ParseOptimizerSpecJson).
  absl::Status SetOptimizerJson(absl::string_view json);
  // InvalidArgument unless in (0, kMaxBucketCapMb].
  absl::Status SetBucketCapMb(double mb);
  absl::Status SetCommMode(v1::JobSpec::CommMode mode);

  // The next parameter's index. InvalidArgument: a name empty, too long or
  // used before, too many dimensions, a dimension < 1, more than 2^40
  // elements. FailedPrecondition after Prepare.
  absl::StatusOr<int> RegisterParameter(absl::string_view name,
                                        std::vector<int64_t> shape);

  // Creates the Trainer. InvalidArgument: no optimizer set, no parameters;
  // FailedPrecondition if already prepared.
  absl::Status Prepare();
  // After Prepare (FailedPrecondition before it).
  absl::StatusOr<Trainer*> trainer();

  // Step calls on the Trainer. A failure in a collective is sticky: later
  // calls fail with Aborted naming it.
  absl::Status GradientReady(int index);
  absl::Status FinishStep();
  absl::StatusOr<double> AverageLoss(double loss);
  absl::Status Barrier();

  // This rank's shard of the optimizer state, for a checkpoint.
  struct OptimizerStateShard {
    // The session's OptimizerSpec, as protobuf JSON.
    std::string optimizer_json;
    std::vector<ParameterOptimizerState> params;
  };
  // After the first step (FailedPrecondition before it).
  absl::StatusOr<OptimizerStateShard> ExportOptimizerState();
  // After Prepare and before the first step: the state FinishStep resumes
  // from (Trainer::LoadOptimizerState's checks). InvalidArgument also when
  // `optimizer_json` is not this session's optimizer (compared as specs).
  absl::Status ImportOptimizerState(absl::string_view optimizer_json,
                                    std::vector<ParameterOptimizerState> params);

  // InvalidArgument: step < 1, samples < 0. Aborted once the coordinator
  // has told rank 0 that the job was stopped.
  absl::Status ReportProgress(int64_t step, double loss, int64_t samples);

  // A final barrier when prepared and healthy, the last progress sent; the
  // session is finished afterwards (every later call fails).
  absl::Status Close();

 private:
  Session(SessionEnvironment env, const Clock& clock);

  // Joins the communicator; in coordinator mode first waits for every
  // rank's program to open its session (DeadlineExceeded names a rank that
  // did not, and its worker).
  absl::Status Join();
  absl::Status CheckHealthy() const;
  absl::Status CheckConfiguring() const;
  // Records `status` as the sticky failure when it came from a collective.
  absl::Status Record(absl::Status status);

  const SessionEnvironment env_;
  const Clock& clock_;

  // Coordinator mode only.
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<AssignmentClient> assignment_;

  std::unique_ptr<KvClient> kv_;
  // Declared before comm_ so that the communicator goes first (trainer.h:
  // an aborted transport may hold the trainer's buffers until it is gone).
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<ProgressReporter> reporter_;

  std::optional<v1::OptimizerSpec> optimizer_;
  double bucket_cap_mb_ = 25;
  v1::JobSpec::CommMode comm_mode_ = v1::JobSpec::REDUCE_BROADCAST;
  std::vector<ParameterInfo> params_;

  absl::Status failure_;
  bool closed_ = false;
  // Set by the reporter's thread when the coordinator stops the job.
  std::atomic<bool> stopped_{false};
  // The previous report, for samples/s.
  int64_t last_report_step_ = 0;
  absl::Time last_report_time_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_API_SESSION_H_
