#include "server/services.h"

#include <chrono>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/proto_time.h"
#include "security/worker_principal.h"
#include "server/wire_codec.h"

namespace pshard {
namespace server {
namespace {

using coordinator::Coordinator;
using security::AuthorizeCall;
using security::Caller;

// Full method names, for the access checks (security/rpc_roles.cc says who
// may call each).
constexpr char kSubmitJob[] = "/pshard.v1.JobService/SubmitJob";
constexpr char kGetJob[] = "/pshard.v1.JobService/GetJob";
constexpr char kListJobs[] = "/pshard.v1.JobService/ListJobs";
constexpr char kCancelJob[] = "/pshard.v1.JobService/CancelJob";
constexpr char kWatchJob[] = "/pshard.v1.JobService/WatchJob";
constexpr char kGetShardAssignment[] =
    "/pshard.v1.ShardService/GetShardAssignment";
constexpr char kListWorkers[] = "/pshard.v1.ClusterService/ListWorkers";
constexpr char kGetWorker[] = "/pshard.v1.ClusterService/GetWorker";
constexpr char kDrainWorker[] = "/pshard.v1.ClusterService/DrainWorker";
constexpr char kUndrainWorker[] = "/pshard.v1.ClusterService/UndrainWorker";
constexpr char kRegisterWorker[] = "/pshard.v1.WorkerControl/RegisterWorker";
constexpr char kHeartbeat[] = "/pshard.v1.WorkerControl/Heartbeat";
constexpr char kKvPut[] = "/pshard.v1.WorkerControl/KvPut";
constexpr char kKvGet[] = "/pshard.v1.WorkerControl/KvGet";
constexpr char kKvGetMany[] = "/pshard.v1.WorkerControl/KvGetMany";
constexpr char kReportBuckets[] = "/pshard.v1.WorkerControl/ReportBuckets";
constexpr char kGetAssignment[] = "/pshard.v1.WorkerControl/GetAssignment";
constexpr char kReportProgress[] = "/pshard.v1.WorkerControl/ReportProgress";
constexpr char kReportResult[] = "/pshard.v1.WorkerControl/ReportResult";
constexpr char kReportCheckpoint[] =
    "/pshard.v1.WorkerControl/ReportCheckpoint";
constexpr char kAttach[] = "/pshard.v1.WorkerControl/Attach";

// A worker's incarnation is the only proof, besides its credential, that a
// call comes from the worker process itself: shown to admins only.
void HideIncarnation(const Caller& caller, v1::WorkerInfo& w) {
  if (!caller.IsAdmin()) w.clear_incarnation();
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                               const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

std::string ByteBufferToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  size_t total = 0;
  for (const grpc::Slice& s : slices) total += s.size();
  bytes.reserve(total);
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

bool ParseByteBuffer(const grpc::ByteBuffer& buffer,
                     google::protobuf::MessageLite* message) {
  return message->ParseFromString(ByteBufferToString(buffer));
}

// A unary call answered later, when the Coordinator calls back (KvGet,
// GetAssignment). The callback may come before the handler returns, on any
// thread, or never (if the wait was cancelled); the shared State makes
// exactly one of {callback, OnCancel} finish the call, and lets a late
// callback find out that the reactor is gone.
template <typename T, typename Response>
class WaitReactor final : public grpc::ServerUnaryReactor {
 public:
  using Fill = std::function<void(T&& value, Response* response)>;
  using StartFn =
      std::function<Coordinator::WaitId(std::function<void(absl::StatusOr<T>)>)>;

  // Starts the wait; the reactor deletes itself when the call is done.
  static WaitReactor* Start(Coordinator* c, Response* response, Fill fill,
                            const StartFn& start) {
    // `fill` runs at most once, from the callback.
    auto* reactor = new WaitReactor(c);
    std::shared_ptr<State> state = reactor->state_;
    const Coordinator::WaitId id =
        start([state, response, fill](absl::StatusOr<T> result) {
          WaitReactor* r;
          {
            absl::MutexLock lock(&state->mu);
            if (state->finished) return;
            state->finished = true;
            r = state->reactor;
          }
          if (result.ok()) fill(*std::move(result), response);
          r->Finish(ToGrpcStatus(result.status()));
        });
    absl::MutexLock lock(&state->mu);
    state->wait_id = id;
    return reactor;
  }

  void OnCancel() override {
    Coordinator::WaitId id;
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->finished) return;
      state_->finished = true;
      id = state_->wait_id;
    }
    if (id != 0) c_->CancelWait(id);
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled"));
  }

  void OnDone() override { delete this; }

 private:
  struct State {
    absl::Mutex mu;
    bool finished ABSL_GUARDED_BY(mu) = false;
    Coordinator::WaitId wait_id ABSL_GUARDED_BY(mu) = 0;
    WaitReactor* reactor = nullptr;
  };

  explicit WaitReactor(Coordinator* c)
      : c_(c), state_(std::make_shared<State>()) {
    state_->reactor = this;
  }

  Coordinator* const c_;
  const std::shared_ptr<State> state_;
};

}  // namespace

// ---- JobService ----

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx,
                                       const v1::SubmitJobRequest* req,
                                       v1::Job* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kSubmitJob);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::Job> job =
      c_->SubmitJob(req->spec(), req->request_id(), caller->name());
  if (job.ok()) *resp = *std::move(job);
  return ToGrpcStatus(job.status());
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx,
                                    const v1::GetJobRequest* req,
                                    v1::Job* resp) {
  absl::StatusOr<Caller> caller = AuthorizeCall(*ctx, options_.access, kGetJob);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::Job> job = c_->GetJob(req->job_id());
  if (job.ok()) *resp = *std::move(job);
  return ToGrpcStatus(job.status());
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx,
                                      const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kListJobs);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  std::vector<v1::JobState> states;
  for (int s : req->states()) states.push_back(static_cast<v1::JobState>(s));
  if (req->limit() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("limit: must be >= 0, got ", req->limit())));
  }
  // `limit` is the page size of clients written before paging.
  const int page_size = req->page_size() != 0 ? req->page_size() : req->limit();
  absl::StatusOr<Coordinator::JobPage> page = c_->ListJobs(
      states, page_size, req->page_token(), options_.max_list_response_bytes);
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (v1::Job& job : page->jobs) *resp->add_jobs() = std::move(job);
  resp->set_next_page_token(std::move(page->next_page_token));
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx,
                                       const v1::CancelJobRequest* req,
                                       v1::Job* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kCancelJob);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (!caller->IsAdmin()) {
    // A job's owner never changes, so checking before cancelling is exact.
    absl::StatusOr<v1::Job> job = c_->GetJob(req->job_id());
    if (!job.ok()) return ToGrpcStatus(job.status());
    if (job->owner() != caller->name()) {
      return ToGrpcStatus(absl::PermissionDeniedError(absl::StrCat(
          caller->name(), " may not cancel ", job->id(), ": it is ",
          job->owner().empty() ? "nobody's" : "\"" + job->owner() + "\"'s",
          ", and cancelling another's job needs role admin")));
    }
  }
  absl::StatusOr<v1::Job> job = c_->CancelJob(req->job_id(), req->reason());
  if (job.ok()) *resp = *std::move(job);
  return ToGrpcStatus(job.status());
}

bool JobServiceImpl::AwaitOpenWatchersAtMost(int n, absl::Duration timeout) {
  absl::MutexLock lock(&watchers_mu_);
  const auto few = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watchers_mu_) {
    return watchers_.open() <= n;
  };
  return clock_->AwaitWithTimeout(watchers_mu_, absl::Condition(&few), timeout);
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx,
                                      const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::JobEvent>* writer) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kWatchJob);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const std::string client = PeerHost(ctx->peer());
  {
    absl::MutexLock lock(&watchers_mu_);
    absl::Status opened = watchers_.Open(client);
    if (!opened.ok()) return ToGrpcStatus(opened);
  }
  absl::Cleanup release = [this, &client] {
    absl::MutexLock lock(&watchers_mu_);
    watchers_.Close(client);
  };

  int64_t after = req->after_sequence();
  for (;;) {
    if (ctx->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    absl::StatusOr<Coordinator::EventBatch> batch =
        c_->GetEvents(req->job_id(), after, 256);
    if (!batch.ok()) return ToGrpcStatus(batch.status());
    for (const v1::JobEvent& event : batch->events) {
      if (!writer->Write(event)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
      after = event.sequence();
    }
    if (!batch->events.empty()) continue;  // drain the log first
    if (batch->terminal) return grpc::Status::OK;
    // Wait for news, a second at a time, so that a vanished client is
    // noticed within one poll.
    auto news = std::make_shared<absl::Notification>();
    const Coordinator::WaitId id = c_->WaitForEvents(
        req->job_id(), after, clock_->Now() + options_.watch_poll,
        [news](absl::Status) { news->Notify(); });
    if (!news->WaitForNotificationWithTimeout(options_.watch_poll +
                                              absl::Milliseconds(100))) {
      c_->CancelWait(id);
    }
  }
}

// ---- ShardService and ClusterService ----

grpc::Status ShardServiceImpl::GetShardAssignment(
    grpc::ServerContext* ctx, const v1::GetShardAssignmentRequest* req,
    v1::ShardAssignment* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kGetShardAssignment);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::ShardAssignment> a = c_->GetShardAssignment(req->job_id());
  if (a.ok()) *resp = *std::move(a);
  return ToGrpcStatus(a.status());
}

grpc::Status ClusterServiceImpl::ListWorkers(grpc::ServerContext* ctx,
                                             const v1::ListWorkersRequest* req,
                                             v1::ListWorkersResponse* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kListWorkers);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<Coordinator::WorkerPage> page =
      c_->ListWorkers(req->include_lost(), req->page_size(), req->page_token());
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (v1::WorkerInfo& w : page->workers) {
    HideIncarnation(*caller, w);
    *resp->add_workers() = std::move(w);
  }
  resp->set_next_page_token(std::move(page->next_page_token));
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::GetWorker(grpc::ServerContext* ctx,
                                           const v1::GetWorkerRequest* req,
                                           v1::WorkerInfo* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kGetWorker);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::WorkerInfo> w = c_->GetWorker(req->worker());
  if (w.ok()) {
    HideIncarnation(*caller, *w);
    *resp = *std::move(w);
  }
  return ToGrpcStatus(w.status());
}

grpc::Status ClusterServiceImpl::DrainWorker(grpc::ServerContext* ctx,
                                             const v1::DrainWorkerRequest* req,
                                             v1::WorkerInfo* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kDrainWorker);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::WorkerInfo> w = c_->DrainWorker(req->worker());
  if (w.ok()) *resp = *std::move(w);
  return ToGrpcStatus(w.status());
}

grpc::Status ClusterServiceImpl::UndrainWorker(
    grpc::ServerContext* ctx, const v1::UndrainWorkerRequest* req,
    v1::WorkerInfo* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kUndrainWorker);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::WorkerInfo> w = c_->UndrainWorker(req->worker());
  if (w.ok()) *resp = *std::move(w);
  return ToGrpcStatus(w.status());
}

// ---- WorkerControl ----

absl::StatusOr<absl::Time> WorkerControlImpl::WaitDeadline(
    const grpc::CallbackServerContext* ctx,
    const google::protobuf::Duration& timeout) const {
  const absl::Duration wait = FromProto(timeout);
  if (wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout: must not be negative");
  }
  // The Coordinator caps every wait at its own max_wait.
  absl::Time deadline = wait == absl::ZeroDuration()
                            ? absl::InfiniteFuture()
                            : clock_->Now() + wait;
  // The client's own deadline (gRPC reports "none" as the largest time). It
  // is a point on gRPC's system_clock, converted once here.
  const auto client = ctx->deadline();
  if (client < std::chrono::system_clock::time_point::max()) {
    deadline = std::min(deadline, absl::FromChrono(client));
  }
  return deadline;
}

absl::Status WorkerControlImpl::CheckActsAs(const Caller& caller,
                                            absl::string_view worker_id) const {
  if (!caller.checked()) return absl::OkStatus();
  return c_->CheckWorkerIsNamed(worker_id, caller.name());
}

absl::Status WorkerControlImpl::CheckHoldsRank(const Caller& caller,
                                               absl::string_view job_id) const {
  if (!caller.checked()) return absl::OkStatus();
  return c_->CheckHoldsRank(caller.name(), job_id);
}

absl::Status WorkerControlImpl::AuthorizeActingAs(
    const grpc::CallbackServerContext& ctx, absl::string_view method,
    absl::string_view worker_id) const {
  absl::StatusOr<Caller> caller = AuthorizeCall(ctx, options_.access, method);
  if (!caller.ok()) return caller.status();
  return CheckActsAs(*caller, worker_id);
}

absl::Status WorkerControlImpl::AuthorizeHoldingRank(
    const grpc::CallbackServerContext& ctx, absl::string_view method,
    absl::string_view job_id) const {
  absl::StatusOr<Caller> caller = AuthorizeCall(ctx, options_.access, method);
  if (!caller.ok()) return caller.status();
  return CheckHoldsRank(*caller, job_id);
}

grpc::ServerUnaryReactor* WorkerControlImpl::RegisterWorker(
    grpc::CallbackServerContext* ctx, const v1::RegisterWorkerRequest* req,
    v1::RegisterWorkerResponse* resp) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kRegisterWorker);
  if (!caller.ok()) return Done(ctx, caller.status());
  if (caller->checked() &&
      !security::WorkerPrincipalMayActAs(caller->name(), req->name())) {
    return Done(ctx, absl::PermissionDeniedError(absl::StrCat(
                         "this credential is \"", caller->name(),
                         "\"'s: it may register only under that name or as "
                         "one of its local ranks \"", caller->name(),
                         ":<i>\" (i < ", security::kMaxLocalRanks,
                         "), not as \"", req->name().substr(0, 253), "\"")));
  }
  absl::StatusOr<v1::RegisterWorkerResponse> r = c_->RegisterWorker(*req);
  if (r.ok()) *resp = *std::move(r);
  return Done(ctx, r.status());
}

grpc::ServerUnaryReactor* WorkerControlImpl::Heartbeat(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kHeartbeat);
  if (!caller.ok()) return Done(ctx, caller.status());
  v1::HeartbeatRequest req;
  if (!ParseByteBuffer(*request, &req)) {
    return Done(ctx, absl::InvalidArgumentError("HeartbeatRequest does not parse"));
  }
  // The caller's worker is checked inside the heartbeat's own locked
  // section: the hottest call takes the coordinator's lock once.
  absl::StatusOr<Coordinator::SharedHeartbeat> r = c_->HeartbeatShared(
      req, caller->checked() ? std::optional<absl::string_view>(caller->name())
                             : std::nullopt);
  if (!r.ok()) return Done(ctx, r.status());
  // The spec is serialized once per epoch (cached by its shared message)
  // and sent by reference in every rank's reply.
  std::optional<grpc::Slice> tail;
  if (r->run_job_spec != nullptr) {
    tail = tails_.Get(r->run_job_spec, [](const v1::JobSpec& spec) {
      return wire::EncodeRunJobSpecTail(spec);
    });
  }
  std::vector<grpc::Slice> slices;
  for (std::optional<std::string>& piece : wire::EncodeHeartbeatResponse(
           r->response, tail.has_value() ? std::optional<size_t>(tail->size())
                                         : std::nullopt)) {
    if (piece.has_value()) {
      slices.emplace_back(std::move(*piece));
    } else {
      slices.push_back(*tail);
    }
  }
  *response = grpc::ByteBuffer(slices.data(), slices.size());
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* WorkerControlImpl::KvPut(
    grpc::CallbackServerContext* ctx, const v1::KvPutRequest* req,
    v1::KvPutResponse*) {
  if (absl::Status s = AuthorizeHoldingRank(*ctx, kKvPut, req->job_id());
      !s.ok()) {
    return Done(ctx, s);
  }
  return Done(ctx, c_->KvPut(*req));
}

grpc::ServerUnaryReactor* WorkerControlImpl::KvGet(
    grpc::CallbackServerContext* ctx, const v1::KvGetRequest* req,
    v1::KvGetResponse* resp) {
  if (absl::Status s = AuthorizeHoldingRank(*ctx, kKvGet, req->job_id());
      !s.ok()) {
    return Done(ctx, s);
  }
  absl::StatusOr<absl::Time> deadline = WaitDeadline(ctx, req->timeout());
  if (!deadline.ok()) return Done(ctx, deadline.status());
  Coordinator* c = c_;
  return WaitReactor<std::string, v1::KvGetResponse>::Start(
      c_, resp,
      [](std::string&& value, v1::KvGetResponse* r) {
        r->set_value(std::move(value));
      },
      [c, req, d = *deadline](auto done) {
        return c->KvGet(req->job_id(), req->epoch(), req->key(), d,
                        std::move(done));
      });
}

grpc::ServerUnaryReactor* WorkerControlImpl::KvGetMany(
    grpc::CallbackServerContext* ctx, const v1::KvGetManyRequest* req,
    v1::KvGetManyResponse* resp) {
  if (absl::Status s = AuthorizeHoldingRank(*ctx, kKvGetMany, req->job_id());
      !s.ok()) {
    return Done(ctx, s);
  }
  absl::StatusOr<absl::Time> deadline = WaitDeadline(ctx, req->timeout());
  if (!deadline.ok()) return Done(ctx, deadline.status());
  Coordinator* c = c_;
  // The values are copied here, on the answering thread, not under the
  // coordinator's lock.
  return WaitReactor<std::vector<coordinator::KvValue>,
                     v1::KvGetManyResponse>::Start(
      c_, resp,
      [](std::vector<coordinator::KvValue>&& values,
         v1::KvGetManyResponse* r) {
        for (const coordinator::KvValue& value : values) r->add_values(*value);
      },
      [c, req, d = *deadline](auto done) {
        return c->KvGetMany(
            req->job_id(), req->epoch(),
            std::vector<std::string>(req->keys().begin(), req->keys().end()),
            d, std::move(done));
      });
}

grpc::ServerUnaryReactor* WorkerControlImpl::ReportBuckets(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kReportBuckets);
  if (!caller.ok()) return Done(ctx, caller.status());
  absl::StatusOr<wire::ReportBucketsFrame> frame =
      wire::DecodeReportBucketsRequest(ByteBufferToString(*request));
  if (!frame.ok()) return Done(ctx, frame.status());
  if (absl::Status s = CheckActsAs(*caller, frame->report.worker_id);
      !s.ok()) {
    return Done(ctx, s);
  }
  const google::protobuf::Duration& timeout = frame->timeout;
  // 0 means "answer at once" here (not "the longest wait", as for KvGet).
  absl::StatusOr<absl::Time> deadline =
      FromProto(timeout) == absl::ZeroDuration()
          ? absl::StatusOr<absl::Time>(absl::InfinitePast())
          : WaitDeadline(ctx, timeout);
  if (!deadline.ok()) return Done(ctx, deadline.status());
  Coordinator* c = c_;
  return WaitReactor<v1::ReportBucketsResponse, grpc::ByteBuffer>::Start(
      c_, response,
      [](v1::ReportBucketsResponse&& r, grpc::ByteBuffer* out) {
        grpc::Slice slice(r.SerializeAsString());
        *out = grpc::ByteBuffer(&slice, 1);
      },
      [c, report = std::move(frame->report), d = *deadline](auto done) {
        return c->ReportLayout(report, d, std::move(done));
      });
}

grpc::ServerUnaryReactor* WorkerControlImpl::GetAssignment(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<Caller> caller =
      AuthorizeCall(*ctx, options_.access, kGetAssignment);
  if (!caller.ok()) return Done(ctx, caller.status());
  v1::GetAssignmentRequest req;
  if (!ParseByteBuffer(*request, &req)) {
    return Done(ctx, absl::InvalidArgumentError(
                         "GetAssignmentRequest does not parse"));
  }
  if (absl::Status s = CheckHoldsRank(*caller, req.job_id()); !s.ok()) {
    return Done(ctx, s);
  }
  absl::StatusOr<absl::Time> deadline = WaitDeadline(ctx, req.timeout());
  if (!deadline.ok()) return Done(ctx, deadline.status());
  Coordinator* c = c_;
  return WaitReactor<Coordinator::AssignmentPtr, grpc::ByteBuffer>::Start(
      c_, response,
      [this](Coordinator::AssignmentPtr&& a, grpc::ByteBuffer* r) {
        grpc::Slice slice = assignments_.Get(
            a, [](const v1::ShardAssignment& m) { return m.SerializeAsString(); });
        *r = grpc::ByteBuffer(&slice, 1);
      },
      [c, job = req.job_id(), epoch = req.epoch(), view = req.view(),
       d = *deadline](auto done) {
        return c->GetAssignment(job, epoch, view, d, std::move(done));
      });
}

grpc::ServerUnaryReactor* WorkerControlImpl::ReportProgress(
    grpc::CallbackServerContext* ctx, const v1::ReportProgressRequest* req,
    v1::ReportProgressResponse* resp) {
  if (absl::Status s =
          AuthorizeActingAs(*ctx, kReportProgress, req->worker_id());
      !s.ok()) {
    return Done(ctx, s);
  }
  absl::StatusOr<v1::ReportProgressResponse> r = c_->ReportProgress(*req);
  if (r.ok()) *resp = *std::move(r);
  return Done(ctx, r.status());
}

grpc::ServerUnaryReactor* WorkerControlImpl::ReportCheckpoint(
    grpc::CallbackServerContext* ctx, const v1::ReportCheckpointRequest* req,
    v1::ReportCheckpointResponse* resp) {
  if (absl::Status s =
          AuthorizeActingAs(*ctx, kReportCheckpoint, req->worker_id());
      !s.ok()) {
    return Done(ctx, s);
  }
  // Blocks this RPC thread while the last shard's manifest is written (a
  // few milliseconds) and pruning verifies what it keeps: one report per
  // rank per checkpoint, far rarer than heartbeats.
  absl::StatusOr<v1::ReportCheckpointResponse> r = c_->ReportCheckpoint(*req);
  if (r.ok()) *resp = *std::move(r);
  return Done(ctx, r.status());
}

grpc::ServerWriteReactor<v1::AttachResponse>* WorkerControlImpl::Attach(
    grpc::CallbackServerContext* ctx, const v1::AttachRequest* req) {
  absl::StatusOr<Caller> caller = AuthorizeCall(*ctx, options_.access, kAttach);
  if (!caller.ok()) return AttachStreams::Refuse(caller.status());
  if (absl::Status s = CheckActsAs(*caller, req->worker_id()); !s.ok()) {
    return AttachStreams::Refuse(s);
  }
  return attach_streams_.Start(*req);
}

grpc::ServerUnaryReactor* WorkerControlImpl::ReportResult(
    grpc::CallbackServerContext* ctx, const v1::ReportResultRequest* req,
    v1::ReportResultResponse*) {
  if (absl::Status s = AuthorizeActingAs(*ctx, kReportResult, req->worker_id());
      !s.ok()) {
    return Done(ctx, s);
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  c_->ReportResultAsync(*req, [reactor](absl::Status status) {
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

}  // namespace server
}  // namespace pshard
