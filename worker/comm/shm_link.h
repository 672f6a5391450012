// ShmLink: the Link (link.h) to a rank on the same host, over shared-memory
// rings (ShmChannel) instead of loopback TCP: one copy into the ring by a
// sender thread, the receiver adding or copying straight out of it. One ring
// per lane and direction; each lane's sends and receives are matched in
// order, which is the order a ring delivers them, so tags are not needed.
//
// Sends are queued to a thread per outgoing ring (a full ring to one peer
// never holds up another); a send's Wait returns once its bytes are in the
// ring. A receive is consumed by its Wait, on the waiting thread.
//
// The rings are set up by ConnectSharedMemory (shm_rendezvous.h).
#ifndef PSHARD_WORKER_COMM_SHM_LINK_H_
#define PSHARD_WORKER_COMM_SHM_LINK_H_

#include <array>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/link.h"
#include "worker/comm/shm_channel.h"
#include "worker/comm/work_impl.h"

namespace pshard::worker {

class ShmLink : public Link {
 public:
  static constexpr int kLanes = 2;

  // out[lane]: the rings this rank writes (it created them); in[lane]: the
  // peer's rings this rank reads. All four non-null. Each wait of the
  // sender threads is bounded by `timeout`.
  ShmLink(std::array<std::unique_ptr<ShmChannel>, kLanes> out,
          std::array<std::unique_ptr<ShmChannel>, kLanes> in,
          absl::Duration timeout);
  ~ShmLink() override;

  absl::StatusOr<std::unique_ptr<Transfer>> Send(const char* data,
                                                 int64_t bytes, uint64_t tag,
                                                 int lane) override;
  absl::StatusOr<std::unique_ptr<Transfer>> Receive(int64_t bytes,
                                                    const Delivery& into,
                                                    uint64_t tag,
                                                    int lane) override;
  void Close() override;

 private:
  struct QueuedSend {
    const char* data = nullptr;
    int64_t bytes = 0;
    std::shared_ptr<CompletionWork> done;
  };

  // The sending end of one ring and the thread that feeds it.
  struct Sender {
    std::unique_ptr<ShmChannel> channel;
    absl::Mutex mu;
    std::deque<QueuedSend> queue ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
    absl::Status failed;  // sender thread only
    std::thread thread;
  };

  void SendLoop(Sender& sender);

  const absl::Duration timeout_;
  std::array<Sender, kLanes> out_;
  std::array<std::unique_ptr<ShmChannel>, kLanes> in_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_SHM_LINK_H_
