// GlooCommunicator: the Communicator for host memory, over Gloo's TCP
// transport. Peers find each other through a KvClient (the coordinator's
// job-scoped key/value store, or an in-memory one in tests).
//
// Every operation is built from Gloo's point-to-point primitives (unbound
// buffers: send/recv with a per-operation slot), never from Gloo's blocking
// collectives, for two reasons:
//   - volume: Reduce sends each non-root's buffer straight to the root, once;
//     Broadcast sends the root's buffer once to each peer. A bucket then costs
//     2(n-1)/n of its size per rank over reduce+broadcast, the minimum.
//     AllReduce is a direct reduce-scatter + all-gather (2(n-1)/n as well).
//   - overlap and abort: an operation is *posted* (its sends and receives are
//     handed to the transport) as soon as every earlier operation touching the
//     same memory has finished, so several buckets are in flight at once and
//     both directions of every link stay busy; and every wait is on an unbound
//     buffer, which Abort() can interrupt.
//
// Threads: an issuer thread posts operations in issue order (and runs Enqueue'd
// functions once everything issued before them has finished); a completion
// thread waits for posted operations in order, does the local arithmetic
// (summing received gradients) and completes their Work. Enqueue's function
// therefore runs after all earlier operations and before any later one is
// posted: the owner's optimizer step sits between a bucket's reduction and its
// broadcast, as the Communicator contract requires.
//
// Same host: ranks that share a machine (and /dev/shm) exchange data through
// shared-memory rings instead of loopback TCP (ShmChannel): one copy into
// the ring by a sender thread, the receiver summing or copying straight out
// of it. Two rings per direction: one for transfers posted in issue order,
// one for all-reduce's second round. Barriers and other hosts use TCP.
//
// Errors: Gloo reports failures by throwing; they are caught here and turned
// into absl::Status (DeadlineExceeded for timeouts, Unavailable for transport
// errors). The first failure is sticky: later operations fail with it, since
// their inputs can no longer be trusted.
#ifndef PSHARD_WORKER_COMM_GLOO_COMMUNICATOR_H_
#define PSHARD_WORKER_COMM_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
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
};

// Connects to the peers of `options.rank` through `kv` (used only during the
// call) and returns the communicator. DeadlineExceeded if the peers do not
// show up within options.timeout; InvalidArgument for a bad rank/world size.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const GlooOptions& options, KvClient& kv);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_GLOO_COMMUNICATOR_H_
