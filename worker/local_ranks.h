// pshard-worker --local_ranks N: one process per node that runs N ranks, as
// torchrun's agent runs nproc_per_node. With N > 1 the process is a small
// supervisor: it starts N children of its own binary (/proc/self/exe), each
// an ordinary one-rank worker with --local_ranks=1, and does nothing else
// (it neither registers nor serves). Child i gets
//
//   --name=<name>:<i>        (security/worker_principal.h: the supervisor's
//                             worker token covers "<name>:<i>")
//   --local_rank=i --local_world_size=N   (shown in its logs)
//   --host=<host>            (the supervisor's, resolved once: every child
//                             reports the same WorkerInfo.host, so the
//                             coordinator places a job's ranks node by node)
//   --device                 cpu: cpu; auto: cuda:i on a node with at least
//                             N GPUs, cpu on a node without any; cuda:K is
//                             refused with N > 1
//   --listen, --metrics_listen, --health_listen
//                            a fixed port P becomes P+i; port 0 stays 0
//   --port_file, --metrics_port_file, --health_port_file
//                            F becomes F.<i> (each child writes its own)
//   --log_dir, --control_dir D becomes D/<i>
//
// and every other flag as the supervisor was given it. Children inherit its
// stdout and stderr (one pod log), run in their own process groups, and die
// with it (PR_SET_PDEATHSIG, common/child_process.h), so a kill -9 of the
// supervisor leaves none behind. SIGTERM or SIGINT to the supervisor is
// forwarded to every child; it waits for them (up to a grace period, then
// SIGKILL) and exits 0 when all exited 0, else 1. A child that exits on its
// own is not restarted: the supervisor stops the others and exits with that
// child's status (its code, or 128 + its signal), so that Kubernetes
// restarts the pod and the coordinator's restart policy handles the jobs
// that lost a rank. Predictable beats clever here: a node is up with all its
// ranks or restarts as a whole.
#ifndef PSHARD_WORKER_LOCAL_RANKS_H_
#define PSHARD_WORKER_LOCAL_RANKS_H_

#include <csignal>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pshard::worker {

// InvalidArgument naming --local_ranks for a count outside
// 1..security::kMaxLocalRanks, and naming --device for cuda:K with a count
// above 1 (one process cannot hand one GPU to N ranks).
absl::Status ValidateLocalRanks(int local_ranks, absl::string_view device_flag);

// The --device of child `local_index` of `local_ranks` given the
// supervisor's --device and the node's CUDA device count: "cpu" for cpu (and
// for auto without GPUs), "cuda:<i>" for auto with at least `local_ranks`
// GPUs. InvalidArgument for auto with fewer GPUs than ranks (but some).
absl::StatusOr<std::string> ChildDeviceFlag(absl::string_view device_flag,
                                            int local_index, int local_ranks,
                                            int cuda_device_count);

// "host:P" -> "host:P+offset" ("[::]:7071" too); port 0 and an empty
// address stay as they are. InvalidArgument for an address without a port
// or one whose port would pass 65535.
absl::StatusOr<std::string> OffsetListenPort(absl::string_view address,
                                             int offset);

// What the supervisor knows when it builds the children's command lines.
struct LocalRanksPlan {
  // /proc/self/exe, resolved.
  std::string binary;
  // The flags given on the command line, as (name, value), in any order.
  std::vector<std::pair<std::string, std::string>> specified_flags;
  // The worker name (--name, or its default) and host (--host resolved).
  std::string name;
  std::string host;
  // --listen with its default applied (security::ListenAddress).
  std::string listen;
  std::string device_flag = "cpu";
  int cuda_device_count = 0;
  int local_ranks = 1;
};

// Child `local_index`'s argv (see the header comment). Errors: as
// ChildDeviceFlag and OffsetListenPort, naming the flag.
absl::StatusOr<std::vector<std::string>> ChildArgv(const LocalRanksPlan& plan,
                                                   int local_index);

// Starts the children and supervises them until they end (see the header
// comment); returns the process's exit status. `stop_requested` is polled
// (a signal handler's flag). Children failing to start stop the others and
// return 1.
int SuperviseLocalRanks(const LocalRanksPlan& plan,
                        const volatile std::sig_atomic_t* stop_requested,
                        absl::Duration grace = absl::Seconds(20));

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_LOCAL_RANKS_H_
