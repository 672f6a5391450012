// TcpTransport: Gloo's TCP transport between all ranks of a communicator,
// and the Link to each peer over it (see link.h). Transfers are Gloo unbound
// buffers, matched by slot; receives that add go through reusable scratch
// buffers, summed into their destination once they have arrived.
//
// Two full-mesh Gloo contexts: one carries data from lower to higher ranks,
// the other from higher to lower. Gloo's TCP pair serialises reads and writes
// on one socket under one lock, so a context per direction keeps both
// directions of every link busy at once. Their pairs are connected here
// (tcp_link.cc, ConnectMesh), not by Gloo's connectFullMesh: each rank puts
// one small record per context into the store (its pairs' host and a port
// per peer) instead of every pair's full address.
//
// Errors: Gloo reports failures by throwing, and these classes are where its
// exceptions become statuses (see GlooErrorToStatus).
#ifndef PSHARD_WORKER_COMM_TCP_LINK_H_
#define PSHARD_WORKER_COMM_TCP_LINK_H_

#include <array>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/link.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace pshard::worker {

// A wait handed to Gloo, and what its failure means. Gloo throws
// gloo::IoException both for its own timeouts ("Timed out waiting ...") and
// for broken connections (gloo/transport/tcp/unbound_buffer.cc, pair.cc): the
// type does not tell them apart, and matching its message would break with
// any rewording. Our own bookkeeping does: a wait that failed once the time
// we gave it had passed timed out (DeadlineExceeded); one that failed earlier
// met a transport error (Unavailable). Gloo measures its waits on the steady
// clock, so this does too (an injected clock could not drive Gloo's waits).
class GlooWait {
 public:
  explicit GlooWait(absl::Duration timeout);

  // The timeout to hand to Gloo (whole milliseconds, at least 1).
  std::chrono::milliseconds timeout() const { return timeout_; }

  // `e`, thrown by the wait, as a status whose message starts with `what`.
  absl::Status ToStatus(const std::exception& e, absl::string_view what) const;

 private:
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
};

// The open files a rank's TCP mesh needs, which Connect checks against
// RLIMIT_NOFILE before it opens any. Connected, it holds a socket per peer
// in each of the two contexts and an epoll descriptor per context: 16 at 8
// ranks (communicator_test TcpMeshHoldsTheFilesItChecksFor). While the
// second context connects, each of its pairs also has a listening socket
// open: hence 3 per peer, plus a few per rank.
inline constexpr int kTcpMeshFilesPerPeer = 3;
inline constexpr int kTcpMeshFilesPerRank = 8;

class TcpTransport {
 public:
  // Connects rank options.rank to every other rank through `kv` (used only
  // during the call). DeadlineExceeded if the peers do not show up within
  // options.timeout; Unavailable for transport errors; the store's error if
  // the store failed. Requires options.world_size > 1.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Connect(
      const GlooOptions& options, KvClient& kv);

  ~TcpTransport();

  // The link to `peer` (a rank other than this one), valid while the
  // transport lives.
  Link& link(int peer);

  // Closes every connection: pending and later waits fail, here and at the
  // peers. Idempotent, thread-safe; after it the transport no longer touches
  // any buffer.
  void Close();

  // Reusable receive buffers: reductions receive every bucket into scratch
  // memory, and fresh multi-megabyte allocations would fault their pages in
  // on every step.
  class ScratchPool {
   public:
    std::unique_ptr<char[]> Acquire(size_t bytes);
    void Release(size_t bytes, std::unique_ptr<char[]> buffer);

   private:
    absl::Mutex mu_;
    std::map<size_t, std::vector<std::unique_ptr<char[]>>> free_
        ABSL_GUARDED_BY(mu_);
  };

 private:
  TcpTransport(int rank, std::array<std::shared_ptr<::gloo::Context>, 2>
                             contexts);

  ::gloo::Context& ContextFor(int src, int dst) {
    return *contexts_[src < dst ? 0 : 1];
  }

  class TcpLink;

  const int rank_;
  std::array<std::shared_ptr<::gloo::Context>, 2> contexts_;
  ScratchPool pool_;
  std::vector<std::unique_ptr<TcpLink>> links_;  // by peer; null for rank_

  absl::Mutex close_mu_;
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_TCP_LINK_H_
