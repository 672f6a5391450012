// FakeCommunicator: N ranks of one process, each a Communicator, meeting in a
// shared FakeHub. For unit tests of code above the communicator (the hook, the
// C++ API): same ordering and Enqueue semantics as the real backends, exact
// arithmetic (ranks are summed in rank order), no sockets.
//
//   FakeHub hub(/*world_size=*/3);
//   // on each of three threads:
//   std::unique_ptr<Communicator> comm = hub.Create(rank);
//
// Each communicator executes its operations in issue order on its own thread;
// a collective completes when every rank has reached it. Aborting any rank
// breaks the hub: every rank's pending and later collectives fail with the
// abort reason, as a dead peer would make them fail on a real transport.
#ifndef PSHARD_WORKER_COMM_FAKE_COMMUNICATOR_H_
#define PSHARD_WORKER_COMM_FAKE_COMMUNICATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace pshard::worker {

class FakeHub {
 public:
  // `timeout`: how long a collective waits for the other ranks before it
  // fails with DeadlineExceeded.
  explicit FakeHub(int world_size, absl::Duration timeout = absl::Seconds(30));

  int world_size() const { return world_size_; }

  // The communicator of `rank` (0 <= rank < world_size; one per rank).
  std::unique_ptr<Communicator> Create(int rank);

  // Fails all pending and future collectives with `reason`.
  void Break(const absl::Status& reason);

  enum class OpKind { kAllReduce, kReduce, kReduceMean, kBroadcast, kBarrier };

  // Called on a rank's executor thread: joins collective number `seq` of that
  // rank and returns once every rank has joined and the result is in place.
  absl::Status Join(int64_t seq, int rank, OpKind kind, void* data,
                    int64_t count, DataType dtype, int root);

 private:
  struct Slot {
    OpKind kind;
    int64_t count = 0;
    DataType dtype = DataType::kFloat32;
    int root = 0;
    std::vector<void*> buffers;
    int arrived = 0;
    int left = 0;
    bool done = false;
    absl::Status status;
  };

  void Execute(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int world_size_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Slot> slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_FAKE_COMMUNICATOR_H_
