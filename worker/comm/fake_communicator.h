// FakeCommunicator: N ranks of one process, each a Communicator, meeting in a
// shared FakeHub. For unit tests of code above the communicator (the hook, the
// C++ API): the real backends' op pipeline (link_communicator.h) — the same
// ordering, Enqueue semantics, overlap, sticky errors and byte counts as the
// Gloo communicator — over in-process links, so no sockets or rings.
//
//   FakeHub hub(/*world_size=*/3);
//   // on each of three threads:
//   std::unique_ptr<Communicator> comm = hub.Create(rank);
//
// A send is copied into the hub when it is posted (as a socket buffer would
// hold it) and is done at once; a link's i-th receive takes the i-th send on
// that direction and lane and adds or copies it into place. Sums are in the
// pipeline's fixed order, so every rank sees the same bits. A receive that meets a send of another size (the
// ranks issued different collectives) breaks the hub with Internal. Aborting
// (or destroying) a rank closes its links: its peers' later sends to it, and
// their receives from it whose bytes it had not sent, fail with its reason —
// as a dead peer makes them fail on a real transport, and the peers' own
// sticky errors then close their links in turn.
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
  // `timeout`: how long a transfer waits for its peer before it fails with
  // DeadlineExceeded.
  explicit FakeHub(int world_size, absl::Duration timeout = absl::Seconds(30));
  ~FakeHub();

  int world_size() const { return world_size_; }

  // The communicator of `rank` (0 <= rank < world_size; one per rank). The
  // hub must outlive it.
  std::unique_ptr<Communicator> Create(int rank);

  // Fails all pending and future transfers of every rank with `reason` (the
  // first reason stays).
  void Break(const absl::Status& reason);

 private:
  class MemoryLink;
  class MemoryTransport;
  class MemorySend;
  class MemoryReceive;

  // One direction and lane between two ranks: sends and receives are
  // numbered in posting order and matched by number.
  struct Channel {
    int64_t sends = 0;
    int64_t receives = 0;
    std::map<int64_t, std::vector<char>> posted;  // sends not yet taken
  };

  Channel& ChannelOf(int src, int dst, int lane)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks `rank`'s links closed with `reason` (the first reason stays).
  void CloseRank(int rank, const absl::Status& reason);
  // Why transfers from `src` to `dst` fail now: the hub is broken or either
  // end is closed; OK otherwise.
  absl::Status Failure(int src, int dst) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int world_size_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> closed_ ABSL_GUARDED_BY(mu_);  // by rank
  std::vector<Channel> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_FAKE_COMMUNICATOR_H_
