// gRPC adapters over coordinator::Coordinator: JobService, ShardService,
// ClusterService and WorkerControl. They only translate: request checks that
// need gRPC (deadlines, cancellation, response sizes) live here; every rule
// about jobs and workers lives in coordinator/. absl::Status becomes
// grpc::Status once, through common/grpc_status.h.
//
// Threading: JobService, ShardService and ClusterService use the synchronous
// API (their handlers return quickly, except WatchJob, which waits at most a
// second at a time and is capped at max_watchers concurrent streams, and
// max_watchers_per_client from one client, so it
// cannot take the sync pool). WorkerControl uses the callback API: KvGet and
// GetAssignment park a callback in the Coordinator instead of a thread, so
// thousands of ranks can wait at once, and an open Attach stream holds no
// thread at all.
#ifndef PSHARD_SERVER_SERVICES_H_
#define PSHARD_SERVER_SERVICES_H_

#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "google/protobuf/arena.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/message_allocator.h"
#include "grpcpp/support/slice.h"

#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "security/access_policy.h"
#include "security/call_auth.h"
#include "server/attach_streams.h"
#include "server/watch_limits.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"

namespace pshard {
namespace server {

struct ServiceOptions {
  // Concurrent WatchJob streams, in all and from one client (the host of
  // its peer address: watch_limits.h); more get RESOURCE_EXHAUSTED naming
  // the limit.
  int max_watchers = 1024;
  int max_watchers_per_client = 8;
  // How long WatchJob waits for news before it checks for cancellation.
  absl::Duration watch_poll = absl::Seconds(1);
  // A ListJobs page ends before this many bytes, so that clients with
  // gRPC's default 4 MiB receive limit can read it.
  int64_t max_list_response_bytes = int64_t{3} << 20;
  // Who may call what (security/access_policy.h); nullptr: anyone may call
  // anything (a plaintext server on loopback, or one requiring client
  // certificates without a policy). Not owned; outlives the services.
  const security::AccessPolicy* access = nullptr;
};

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(coordinator::Coordinator* c, const Clock* clock,
                 ServiceOptions options)
      : c_(c),
        clock_(clock),
        options_(options),
        watchers_(options.max_watchers_per_client, options.max_watchers) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx,
                         const v1::SubmitJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx,
                        const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx,
                         const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  // Streams events after req->after_sequence until the job ends; returns
  // CANCELLED when the client goes away or the server shuts down.
  grpc::Status WatchJob(grpc::ServerContext* ctx,
                        const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;

  // Waits until at most `n` WatchJob streams are open; false after `timeout`
  // on the service's clock. A client's cancel ends its stream within one
  // watch_poll: tests wait for that instead of retrying.
  bool AwaitOpenWatchersAtMost(int n, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(watchers_mu_);

 private:
  coordinator::Coordinator* const c_;
  const Clock* const clock_;
  const ServiceOptions options_;
  absl::Mutex watchers_mu_;
  WatchLimits watchers_ ABSL_GUARDED_BY(watchers_mu_);  // open WatchJob streams
};

class ShardServiceImpl final : public v1::ShardService::Service {
 public:
  ShardServiceImpl(coordinator::Coordinator* c, ServiceOptions options)
      : c_(c), options_(options) {}
  grpc::Status GetShardAssignment(grpc::ServerContext* ctx,
                                  const v1::GetShardAssignmentRequest* req,
                                  v1::ShardAssignment* resp) override;

 private:
  coordinator::Coordinator* const c_;
  const ServiceOptions options_;
};

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  ClusterServiceImpl(coordinator::Coordinator* c, ServiceOptions options)
      : c_(c), options_(options) {}
  grpc::Status ListWorkers(grpc::ServerContext* ctx,
                           const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;
  grpc::Status GetWorker(grpc::ServerContext* ctx,
                         const v1::GetWorkerRequest* req,
                         v1::WorkerInfo* resp) override;
  grpc::Status DrainWorker(grpc::ServerContext* ctx,
                           const v1::DrainWorkerRequest* req,
                           v1::WorkerInfo* resp) override;
  grpc::Status UndrainWorker(grpc::ServerContext* ctx,
                             const v1::UndrainWorkerRequest* req,
                             v1::WorkerInfo* resp) override;

 private:
  coordinator::Coordinator* const c_;
  const ServiceOptions options_;
};

// Allocates a unary call's request and response on one protobuf Arena, freed
// in one go when the call ends (cheaper than many small heap allocations for
// requests with many strings or large bytes).
template <typename Request, typename Response>
class ArenaMessageAllocator final
    : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    return new Holder;
  }

 private:
  static google::protobuf::ArenaOptions Options() {
    google::protobuf::ArenaOptions options;
    options.start_block_size = 16 << 10;
    options.max_block_size = 1 << 20;
    return options;
  }
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() : arena_(Options()) {
      this->set_request(
          google::protobuf::Arena::CreateMessage<Request>(&arena_));
      this->set_response(
          google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }
    void Release() override { delete this; }

   private:
    google::protobuf::Arena arena_;
  };
};

// The wire form of a few recently sent shared messages, keyed by pointer, so
// that each is serialized once however many ranks receive it. Thread-safe.
template <typename T>
class SliceCache {
 public:
  explicit SliceCache(size_t capacity) : capacity_(capacity) {}

  // The slice for `key`, made by `make(*key)` (a string) on a miss.
  template <typename Make>
  grpc::Slice Get(const std::shared_ptr<const T>& key, Make make) {
    absl::MutexLock lock(&mu_);
    for (const auto& [ptr, slice] : entries_) {
      if (ptr == key) return slice;
    }
    grpc::Slice slice(make(*key));
    entries_.emplace_back(key, slice);
    if (entries_.size() > capacity_) entries_.pop_front();
    return slice;
  }

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<std::pair<std::shared_ptr<const T>, grpc::Slice>> entries_
      ABSL_GUARDED_BY(mu_);
};

// GetAssignment and Heartbeat are raw methods so that what every rank of a
// job receives alike is serialized once and sent by reference: the published
// assignment (in the view asked for), and the spec inside RunJob.
// ReportBuckets is raw too: every rank sends the same layout (or only its
// fingerprint), so after the first one a report is checked by comparing
// bytes, without parsing; a fingerprint-only report may wait (like KvGet) for
// the first full one.
class WorkerControlImpl final
    : public v1::WorkerControl::WithRawCallbackMethod_Heartbeat<
          v1::WorkerControl::WithRawCallbackMethod_GetAssignment<
              v1::WorkerControl::WithRawCallbackMethod_ReportBuckets<
                  v1::WorkerControl::CallbackService>>> {
 public:
  WorkerControlImpl(coordinator::Coordinator* c,
                    const Clock* clock, ServiceOptions options)
      : c_(c), clock_(clock), options_(options) {
    SetMessageAllocatorFor_KvPut(&kv_put_allocator_);
  }

  grpc::ServerUnaryReactor* RegisterWorker(
      grpc::CallbackServerContext* ctx, const v1::RegisterWorkerRequest* req,
      v1::RegisterWorkerResponse* resp) override;
  // Request: HeartbeatRequest; response: HeartbeatResponse, as bytes.
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvPut(grpc::CallbackServerContext* ctx,
                                  const v1::KvPutRequest* req,
                                  v1::KvPutResponse* resp) override;
  // Waits min(req->timeout (0: no limit), the RPC deadline), capped by the
  // Coordinator at its max_wait.
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* ctx,
                                  const v1::KvGetRequest* req,
                                  v1::KvGetResponse* resp) override;
  grpc::ServerUnaryReactor* KvGetMany(grpc::CallbackServerContext* ctx,
                                      const v1::KvGetManyRequest* req,
                                      v1::KvGetManyResponse* resp) override;
  // Request: ReportBucketsRequest, as bytes (see the class comment); a
  // fingerprint-only report waits up to min(req.timeout (0: not at all), the
  // RPC deadline).
  grpc::ServerUnaryReactor* ReportBuckets(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  // Waits like KvGet. Request: GetAssignmentRequest; response:
  // ShardAssignment, both as bytes.
  grpc::ServerUnaryReactor* GetAssignment(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportProgress(
      grpc::CallbackServerContext* ctx, const v1::ReportProgressRequest* req,
      v1::ReportProgressResponse* resp) override;
  grpc::ServerUnaryReactor* ReportResult(
      grpc::CallbackServerContext* ctx, const v1::ReportResultRequest* req,
      v1::ReportResultResponse* resp) override;
  grpc::ServerUnaryReactor* ReportCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::ReportCheckpointRequest* req,
      v1::ReportCheckpointResponse* resp) override;
  // Held open for the worker's membership (attach_streams.h).
  grpc::ServerWriteReactor<v1::AttachResponse>* Attach(
      grpc::CallbackServerContext* ctx, const v1::AttachRequest* req) override;

  // The open Attach streams; the server closes them first when it shuts
  // down.
  AttachStreams& attach_streams() { return attach_streams_; }

 private:
  // The checks for a caller whose credential names a worker: that
  // `worker_id` is that worker, and that it holds a rank of `job_id`. OK for
  // unchecked callers.
  absl::Status CheckActsAs(const security::Caller& caller,
                           absl::string_view worker_id) const;
  absl::Status CheckHoldsRank(const security::Caller& caller,
                              absl::string_view job_id) const;
  // AuthorizeCall for `method`, then CheckActsAs / CheckHoldsRank: for the
  // typed methods, whose request gRPC has parsed already (the raw ones
  // authorize before they parse, and check after).
  absl::Status AuthorizeActingAs(const grpc::CallbackServerContext& ctx,
                                 absl::string_view method,
                                 absl::string_view worker_id) const;
  absl::Status AuthorizeHoldingRank(const grpc::CallbackServerContext& ctx,
                                    absl::string_view method,
                                    absl::string_view job_id) const;

  // The deadline of a blocking wait, or InvalidArgument for a negative
  // timeout.
  absl::StatusOr<absl::Time> WaitDeadline(
      const grpc::CallbackServerContext* ctx,
      const google::protobuf::Duration& timeout) const;

  coordinator::Coordinator* const c_;
  const Clock* const clock_;
  const ServiceOptions options_;
  ArenaMessageAllocator<v1::KvPutRequest, v1::KvPutResponse> kv_put_allocator_;
  // Published assignments (both views) and RunJob tails (the spec of an
  // epoch, wire::EncodeRunJobSpecTail).
  SliceCache<v1::ShardAssignment> assignments_{8};
  SliceCache<v1::JobSpec> tails_{16};
  AttachStreams attach_streams_{c_};
};

}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_SERVICES_H_
