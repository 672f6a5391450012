// When a failed job restarts instead of ending, and on which workers (see
// "Restart after a failure" in coordinator.h). Pure functions over plain
// data, so the policy is testable without a coordinator; the coordinator
// applies it under its lock.
//
//   failure ──(cause not the job's own, restarts < max_restarts)──▶ restart:
//     ≥ world_size workers (survivors first, then idle)  ▶ new epoch at world_size
//     ≥ min_world_size                                   ▶ new epoch, smaller world
//     fewer                                              ▶ QUEUED at the head,
//                                                          placed at ≥ min_world_size
//   otherwise ──▶ FAILED (max_restarts 0: exactly as before restarts existed)
#ifndef PSHARD_COORDINATOR_RESTART_POLICY_H_
#define PSHARD_COORDINATOR_RESTART_POLICY_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "coordinator/scheduler.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/job_spec.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace coordinator {

// Whether a failure of this cause may restart a job with `spec` at all:
// PEER and WORKER failures (and lost workers, which are WORKER) may; the
// job's own (JOB, UNSPECIFIED) only for a program that asks for it.
bool RestartableCause(const v1::JobSpec& spec, v1::FailureCause cause);

// The smallest world a restart may use: min_world_size, or world_size where
// it is unset (a job stored before the field existed).
int MinRestartWorld(const v1::JobSpec& spec);

// "restart R of M after: <cause>", the new epoch's reason.
std::string RestartReason(int restart, int max_restarts,
                          absl::string_view cause);

// The reason of a job queued until enough workers are idle for its restart;
// RestartReasonOfWaiting gives back what RestartReason made (the job's
// reason is durable, so a coordinator restart loses neither).
std::string WaitingForRestartReason(absl::string_view restart_reason,
                                    int world_size, int min_world_size);
std::string RestartReasonOfWaiting(absl::string_view waiting_reason);

// The reason of a QUEUED job: `prefix` (what brought it there: "submitted",
// or a RestartReason when `restarting`), then what it waits for. When the
// job needs more workers than `pool` (those registered and not draining,
// busy ones included) it can never start as the pool is: "<prefix>; needs
// 64 workers; 3 are registered and not draining"; otherwise "<prefix>;
// waiting for N idle workers" (WaitingForRestartReason's form when
// restarting). A restarting job needs MinRestartWorld.
std::string QueuedReason(absl::string_view prefix, const v1::JobSpec& spec,
                         bool restarting, int64_t pool);
// The prefix QueuedReason (or WaitingForRestartReason) was given.
std::string QueuedReasonPrefix(absl::string_view queued_reason);
// The cause inside a RestartReason.
std::string CauseOfRestartReason(absl::string_view restart_reason);

// The workers of a restart, by rank: every one of `survivors` (the old
// epoch's members that may run again) that is in `idle`, then the rest of
// `idle`, up to `world_size`, ordered as PlaceRanks orders a gang. Empty
// when fewer than `min_world_size` can be had.
std::vector<int64_t> PlaceRestart(const std::vector<IdleWorker>& idle,
                                  const std::set<int64_t>& survivors,
                                  int world_size, int min_world_size);

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_RESTART_POLICY_H_
