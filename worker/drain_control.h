// A worker's local drain control (--control_dir): how a Kubernetes preStop
// hook, `pshard-worker --drain_and_wait`, asks the worker in its own
// container to drain and learns when it has (docs/deploy.md, "Stopping a
// worker"). Files in a directory only the pod can write (an emptyDir), not
// an RPC: whoever can ask is already inside the pod, so no credential, port
// or role is involved, and the hook needs none of the worker's TLS or token
// flags.
//
//   <dir>/pid      the worker's pid, written when it starts (a restarted
//                  container's stale drain and drained files are removed
//                  first: an emptyDir outlives the container)
//   <dir>/drain    created by --drain_and_wait: drain now
//   <dir>/drained  written by the worker once drained: it runs no job, or
//                  its job has committed a checkpoint since the drain began
//
// A `--local_ranks N` node's children each have their own directory,
// <dir>/<i>, and --drain_and_wait on <dir> drains all of them.
#ifndef PSHARD_WORKER_DRAIN_CONTROL_H_
#define PSHARD_WORKER_DRAIN_CONTROL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace pshard::worker {

// The worker's side.
class DrainControl {
 public:
  // Creates `dir` if it is missing (its parent must exist), removes a
  // previous process's drain and drained files, and writes this process's
  // pid. InvalidArgument naming --control_dir when `dir` is not a writable
  // directory.
  static absl::StatusOr<DrainControl> Open(std::string dir);

  // Whether --drain_and_wait has asked for a drain.
  bool DrainRequested() const;
  // Tells --drain_and_wait that the drain is done.
  absl::Status MarkDrained() const;

  const std::string& dir() const { return dir_; }

 private:
  explicit DrainControl(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// The preStop hook's side: asks every live worker under `dir` (`dir` itself
// when it holds a pid file, else `dir`/0, `dir`/1, ... while they exist) to
// drain, and waits until each has written `drained` or exited. OK at once
// when no worker runs there (nothing to drain). DeadlineExceeded naming the
// workers still draining when `timeout` passes on `clock`; InvalidArgument
// when `dir` does not exist. Polls every `poll` (the worker checks for the
// request as often).
absl::Status DrainAndWait(const std::string& dir, absl::Duration timeout,
                          const Clock& clock = Clock::Real(),
                          absl::Duration poll = absl::Milliseconds(100));

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_DRAIN_CONTROL_H_
