// Link: the transport seam under the GlooCommunicator — one rank's
// point-to-point connection to one peer, as Gloo's own transport::Pair. The
// communicator's op pipeline (gloo_communicator.cc) builds every collective
// from Send and Receive on links and never asks which kind a link is; the
// kind is chosen once per peer at setup:
//   - TcpLink (tcp_link.h): Gloo's TCP pairs, over unbound buffers;
//   - ShmLink (shm_link.h): shared-memory rings to a rank on this host.
//
// Matching: each (direction, lane) of a link is an ordered stream. Both ranks
// post the transfers of one lane in the same order (operations are issued in
// the same order everywhere), and the i-th receive gets the i-th send. Lane 0
// carries transfers posted in issue order; lane 1 the all-reduce's second
// round, which is posted later, in operation order. `tag` (the operation's
// sequence number) names the transfer for transports that match by slot.
//
// Transfers are posted without waiting, many at once, and waited for later,
// each wait with a deadline. Close() fails every pending and later wait on
// either end (the peer notices too); it is idempotent and thread-safe.
#ifndef PSHARD_WORKER_COMM_LINK_H_
#define PSHARD_WORKER_COMM_LINK_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace pshard::worker {

// What a receive does with its bytes: copies them to `dst`, or adds them
// (elements of `dtype`) into `dst`, dividing the sum by `divisor` when it is
// positive (the last addition of a mean).
struct Delivery {
  char* dst = nullptr;
  bool add = false;
  DataType dtype = DataType::kFloat32;
  float divisor = 0;
};

// One posted send or receive.
class Transfer {
 public:
  virtual ~Transfer() = default;

  // Waits until the transfer is finished: a send's data may be reused, a
  // receive's bytes are delivered. Errors: DeadlineExceeded (nothing within
  // `timeout`), Unavailable (the peer or the transport failed), Aborted
  // (AbortWait, or the link was closed). The transport may still touch the
  // transfer's memory after a failed wait until its link is closed.
  virtual absl::Status Wait(absl::Duration timeout) = 0;

  // Makes a pending or later Wait return Aborted soon. Thread-safe.
  virtual void AbortWait() = 0;
};

class Link {
 public:
  virtual ~Link() = default;

  // Posts a send of [data, data + bytes) on `lane` (0 or 1); the memory must
  // stay valid until the transfer's Wait succeeded or the link is closed.
  // Unavailable if the transport refuses it.
  virtual absl::StatusOr<std::unique_ptr<Transfer>> Send(const char* data,
                                                         int64_t bytes,
                                                         uint64_t tag,
                                                         int lane) = 0;

  // Posts a receive of `bytes` bytes on `lane`, delivered as `into` says
  // (into.dst must stay valid like a send's data). Unavailable if the
  // transport refuses it.
  virtual absl::StatusOr<std::unique_ptr<Transfer>> Receive(
      int64_t bytes, const Delivery& into, uint64_t tag, int lane) = 0;

  // Fails every pending and later wait, here and at the peer.
  virtual void Close() = 0;
};

// Delivers `length` bytes at `data` to offset `offset` of `into`.
void Deliver(const Delivery& into, int64_t offset, const char* data,
             int64_t length);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_LINK_H_
