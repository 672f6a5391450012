// What the restart end-to-end tests share: kill the worker of a rank once
// the job has trained (and checkpointed) far enough, then watch the job
// restart and end.
#ifndef PSHARD_TESTS_WORKER_RESTART_TESTING_H_
#define PSHARD_TESTS_WORKER_RESTART_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pshard/v1/job.pb.h"
#include "pshard/v1/job_spec.pb.h"
#include "tests/testing/cluster.h"

namespace pshard::testing {

// A 2-rank `mlp` job (32 inputs, 8 outputs) with Adam, in the sizes the
// restart tests vary; fields left 0 stay unset in the spec.
struct MlpJob {
  std::string name;
  std::vector<int> hidden_dims;
  int batch_size = 0;
  double bucket_cap_mb = 0;
  int64_t steps = 0;
  uint64_t seed = 0;
  double lr = 0;
  int collective_timeout_seconds = 0;
  int progress_every = 0;
};
v1::JobSpec MlpJobSpec(const MlpJob& job, const std::string& output_dir);

// One restart allowed, from checkpoints every 10 steps (the last 2 kept)
// under <cluster dir>/ckpt-<job name>.
void CheckpointEvery10(Cluster& cluster, v1::JobSpec& spec);

// The index of the cluster worker holding `rank` of the job; -1 if none.
int WorkerIndexOfRank(Cluster& cluster, const v1::Job& job, int rank);

bool HasCompleteCheckpoint(const v1::Job& job);

// Submits `spec`, SIGKILLs the worker of `rank` once the job is past step
// 20 (and, when it checkpoints, has a complete checkpoint), waits until it
// trains again in a new epoch, and returns the job as it ended. Prints the
// time from the kill to training again (docs/BENCHMARKS.md), also set in
// `*to_training` when given. Test failures are recorded with gtest's
// EXPECTs; the returned job is empty then.
v1::Job RunAndKillRank(Cluster& cluster, const v1::JobSpec& spec, int rank,
                       absl::Duration* to_training = nullptr);

// Submits `spec` and returns the job as it ended, once `idle_workers` are
// idle again.
v1::Job RunToEnd(Cluster& cluster, const v1::JobSpec& spec, int idle_workers);

// The job's restart events, in order.
std::vector<v1::JobEvent::Restart> RestartEvents(Cluster& cluster,
                                                 const std::string& id);

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_WORKER_RESTART_TESTING_H_
