// GlooCommunicator: the Communicator for host memory between processes, the
// op pipeline of link_communicator.h over two kinds of Link, chosen per peer
// once at setup:
//   - TCP (tcp_link.h): Gloo's TCP pairs, unbound buffers with a slot per
//     transfer, one context per direction so both directions of every link
//     stay busy;
//   - shared memory (shm_link.h): for ranks on the same host (same kernel
//     boot id, /dev/shm shared; shm_rendezvous.h), rings instead of loopback
//     TCP: one copy into the ring by a sender thread, the receiver summing or
//     copying straight out of it. One ring per lane and direction. Barriers
//     and other hosts use TCP.
// Peers find each other through a KvClient (the coordinator's job-scoped
// key/value store, or an in-memory one in tests).
//
// Errors: Gloo reports failures by throwing; tcp_link.cc turns them into
// absl::Status (DeadlineExceeded for timeouts, told by our own deadline
// bookkeeping, Unavailable for transport errors). The first failure is
// sticky (link_communicator.h).
#ifndef PSHARD_WORKER_COMM_GLOO_COMMUNICATOR_H_
#define PSHARD_WORKER_COMM_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/comm/communicator.h"
#include "worker/comm/kv_store.h"

namespace pshard::worker {

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // Address (host name or IP) this rank listens on and publishes to peers.
  std::string hostname = "127.0.0.1";
  // Deadline for rendezvous and for every single operation
  // (JobSpec.collective_timeout_seconds).
  absl::Duration timeout = absl::Seconds(60);
  // Prefix of every rendezvous key, so that communicators sharing a store
  // (tests; several communicators of one job) do not collide.
  std::string key_prefix;
  // Operations posted but not yet completed, at most.
  int max_in_flight = 256;
  // Reduce and broadcast between ranks on the same host (same kernel boot
  // id, /dev/shm shared) go through shared-memory rings instead of loopback
  // TCP; any rank pair where that fails falls back to TCP.
  bool shared_memory = true;
  // Size of each ring (one per ordered pair of same-host ranks).
  int64_t shm_ring_bytes = int64_t{16} << 20;
  // Measures the shared-memory rings' timeouts; must outlive the
  // communicator. (Gloo's own TCP waits run on the steady clock: tcp_link.h.)
  const Clock* clock = &Clock::Real();
};

// Connects to the peers of `options.rank` through `kv` (used only during the
// call) and returns the communicator. DeadlineExceeded if the peers do not
// show up within options.timeout; InvalidArgument for a bad rank/world size.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const GlooOptions& options, KvClient& kv);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_GLOO_COMMUNICATOR_H_
