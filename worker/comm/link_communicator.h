// LinkCommunicator: the op pipeline of the host-memory communicators, over
// one Link (link.h) per peer. The Gloo communicator runs it over TCP and
// shared-memory links (gloo_communicator.h); the fake over in-process links
// (fake_communicator.h). The pipeline never asks which kind a link is.
//
// Every operation is built from point-to-point transfers, never from blocking
// collectives, for two reasons:
//   - volume: Reduce sends each non-root's buffer straight to the root, once;
//     Broadcast sends the root's buffer once to each peer. A bucket then costs
//     2(n-1)/n of its size per rank over reduce+broadcast, the minimum.
//     AllReduce is a direct reduce-scatter + all-gather (2(n-1)/n as well).
//   - overlap and abort: an operation is *posted* (its sends and receives are
//     handed to the links) as soon as every earlier operation touching the
//     same memory has finished, so several buckets are in flight at once and
//     both directions of every link stay busy; and every wait has a deadline
//     and can be interrupted by Abort().
//
// Threads: an issuer thread posts operations in issue order (Enqueue'd
// functions are handed over at once, never held back); a completion thread
// waits for posted operations in order, does the local arithmetic as each
// receive is delivered (summing received gradients) and completes their
// Work; it runs an Enqueue'd function once everything issued before it has
// finished. Enqueue's function therefore runs after all earlier operations
// and before any later one that touches its memory: the owner's optimizer
// step sits between a bucket's reduction and its broadcast, as the
// Communicator contract requires. An all-reduce's second round (lane 1) is
// posted once its first has arrived, while later operations proceed.
//
// Errors: the first failure is sticky: it closes every link (peers fail
// fast), and later operations fail with it, since their inputs can no
// longer be trusted.
#ifndef PSHARD_WORKER_COMM_LINK_COMMUNICATOR_H_
#define PSHARD_WORKER_COMM_LINK_COMMUNICATOR_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/comm/link.h"

namespace pshard::worker {

// All of one rank's links, chosen once when the communicator is set up.
class Transport {
 public:
  virtual ~Transport() = default;

  // The link that carries data to and from `peer` (a rank other than this
  // one); valid while the transport lives.
  virtual Link& DataLink(int peer) = 0;

  // The link that carries barrier tokens; the data link by default.
  virtual Link& BarrierLink(int peer) { return DataLink(peer); }

  // Closes every link (Link::Close) because of `reason` (the communicator's
  // first error), which a transport that can tell its peers passes on.
  // Idempotent, thread-safe.
  virtual void Close(const absl::Status& reason) = 0;
};

struct LinkCommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  // Deadline of every single wait on a transfer.
  absl::Duration timeout = absl::Seconds(60);
  // Operations posted but not yet completed, at most.
  int max_in_flight = 256;
};

// The communicator of options.rank over `transport` (null for a world of
// one). Arguments are the caller's to check (rank in range, timeout > 0).
std::unique_ptr<Communicator> CreateLinkCommunicator(
    const LinkCommunicatorOptions& options,
    std::unique_ptr<Transport> transport);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_LINK_COMMUNICATOR_H_
