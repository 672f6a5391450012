// The WorkerControl.Attach streams of one server: fast loss detection.
//
// A worker holds one Attach stream open for its membership's life. The
// stream is accepted (one AttachResponse) when Coordinator::AttachWorker
// accepts it, and then stays open. When it ends because the worker went
// away (gRPC's OnCancel: the client cancelled, or its connection closed, as
// when the process is killed), the stream's OnDone calls
// Coordinator::WorkerDetached, which makes the worker LOST at once if the
// stream was still its current attachment. When it ends because the server
// shuts down (Close), nothing is detached: the coordinator is going away,
// not the worker, and after a restart its workers are given recovery_grace
// to come back.
//
//   Start ──(AttachWorker ok)──▶ OPEN ──(OnCancel / failed write)──▶ detach
//     │                           │
//     └──(error)──▶ finished      └──(Close)──▶ UNAVAILABLE, no detach
//
// Thread-safe. The coordinator must outlive the server that serves these
// streams: grpc::Server::Shutdown returns only after every stream's OnDone.
#ifndef PSHARD_SERVER_ATTACH_STREAMS_H_
#define PSHARD_SERVER_ATTACH_STREAMS_H_

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "grpcpp/support/server_callback.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace server {

class AttachStreams {
 public:
  explicit AttachStreams(coordinator::Coordinator* c) : c_(c) {}
  AttachStreams(const AttachStreams&) = delete;
  AttachStreams& operator=(const AttachStreams&) = delete;

  // Serves one Attach call: the reactor to return from the handler. It
  // finishes at once with the coordinator's error (InvalidArgument,
  // NotFound), or with UNAVAILABLE after Close.
  grpc::ServerWriteReactor<v1::AttachResponse>* Start(
      const v1::AttachRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

  // A reactor that finishes at once with `status` (a refused caller).
  static grpc::ServerWriteReactor<v1::AttachResponse>* Refuse(
      const absl::Status& status);

  // Finishes every open stream with UNAVAILABLE ("coordinator shutting
  // down") without detaching its worker, and refuses new ones; so that a
  // server's Shutdown need not wait for them. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  // Waits (real time, up to `timeout`) until exactly `n` streams are open;
  // false on timeout. For tests.
  bool AwaitOpen(int n, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Stream;

  coordinator::Coordinator* const c_;
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Open streams; each is alive while it is here (it leaves in its OnDone,
  // before it is deleted).
  absl::flat_hash_set<Stream*> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_ATTACH_STREAMS_H_
