#include "bench/coordinator/sim_worker.h"

#include <chrono>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/proto_time.h"
#include "grpcpp/client_context.h"
#include "worker/runtime/assignment_client.h"

namespace pshard {
namespace bench {

// A simulated worker is load in real time: its pacing (heartbeats, step
// time, retries) and the latencies it times use absl::Now/SleepFor, not an
// injected Clock; gRPC deadlines are on gRPC's system_clock.

// The worker's AssignmentClient speaks through this: each call is one
// retried gRPC call on the sim worker's current stub, timed into its sink.
class SimAssignmentRpcs : public worker::AssignmentRpcs {
 public:
  explicit SimAssignmentRpcs(SimWorker* sim) : sim_(sim) {}

  absl::StatusOr<v1::ReportBucketsResponse> ReportBuckets(
      const v1::ReportBucketsRequest& request,
      absl::Duration deadline) override {
    return Call("ReportBuckets", &Stub::ReportBuckets, request, deadline);
  }

  absl::StatusOr<v1::ShardAssignment> GetAssignment(
      const v1::GetAssignmentRequest& request,
      absl::Duration deadline) override {
    return Call("GetAssignment", &Stub::GetAssignment, request, deadline);
  }

 private:
  using Stub = v1::WorkerControl::Stub;

  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(
      const char* method,
      grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&,
                                Response*),
      const Request& request, absl::Duration deadline) {
    Response response;
    grpc::Status s = sim_->Retry(
        method,
        [&](grpc::ClientContext* ctx) {
          return (sim_->Stub().get()->*rpc)(ctx, request, &response);
        },
        deadline);
    if (!s.ok()) return FromGrpcStatus(s, method);
    return response;
  }

  SimWorker* const sim_;
};

SimWorker::SimWorker(std::shared_ptr<grpc::Channel> channel,
                     SimWorkerOptions options, LatencySink sink)
    : options_(std::move(options)),
      incarnation_(absl::StrCat("inc-", absl::Uniform<uint64_t>(absl::BitGen()))),
      sink_(std::move(sink)),
      stub_(v1::WorkerControl::NewStub(channel)) {}

SimWorker::~SimWorker() {
  StopHeartbeats();
  abort_ = true;
  stop_ = true;
  JoinJob();
}

void SimWorker::SetChannel(std::shared_ptr<grpc::Channel> channel) {
  absl::MutexLock lock(&mu_);
  stub_ = v1::WorkerControl::NewStub(channel);
}

std::shared_ptr<v1::WorkerControl::Stub> SimWorker::Stub() {
  absl::MutexLock lock(&mu_);
  return stub_;
}

absl::Status SimWorker::Register() {
  v1::RegisterWorkerRequest req;
  req.set_name(options_.name);
  req.set_incarnation(incarnation_);
  req.set_host(options_.host);
  req.set_address(absl::StrCat(options_.host, ":0"));
  req.set_device_kind(v1::CPU);
  req.set_device("cpu");
  v1::RegisterWorkerResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   absl::ToChronoSeconds(options_.rpc_timeout));
  const absl::Time start = absl::Now();
  grpc::Status s = Stub()->RegisterWorker(&ctx, req, &resp);
  if (sink_) sink_("RegisterWorker", absl::Now() - start);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }
  id_ = resp.worker_id();
  return absl::OkStatus();
}

absl::Status SimWorker::Heartbeat() {
  v1::HeartbeatRequest req;
  req.set_worker_id(id_);
  req.set_incarnation(incarnation_);
  {
    absl::MutexLock lock(&mu_);
    req.set_state(busy_ ? v1::BUSY : v1::IDLE);
    if (busy_) {
      req.set_job_id(job_id_);
      req.set_epoch(epoch_);
      req.set_step(step_);
    }
  }
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   absl::ToChronoSeconds(options_.rpc_timeout));
  const absl::Time start = absl::Now();
  grpc::Status s = Stub()->Heartbeat(&ctx, req, &resp);
  if (sink_) sink_("Heartbeat", absl::Now() - start);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) return Register();
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }
  for (const v1::Directive& d : resp.directives()) {
    if (d.has_abort_job()) {
      absl::MutexLock lock(&mu_);
      if (busy_ && job_id_ == d.abort_job().job_id() &&
          epoch_ == d.abort_job().epoch()) {
        abort_ = true;
      }
    }
    if (d.has_run_job()) {
      {
        absl::MutexLock lock(&mu_);
        if (busy_ && job_id_ == d.run_job().job_id() &&
            epoch_ == d.run_job().epoch()) {
          continue;  // already running it
        }
        if (busy_) continue;  // still finishing an aborted job; RunJob repeats
      }
      JoinJob();
      {
        absl::MutexLock lock(&mu_);
        busy_ = true;
        job_id_ = d.run_job().job_id();
        epoch_ = d.run_job().epoch();
        step_ = 0;
      }
      abort_ = false;
      job_thread_ = std::thread([this, run = d.run_job()] { RunJob(run); });
    }
  }
  return absl::OkStatus();
}

void SimWorker::StartHeartbeats(absl::Duration interval) {
  heartbeats_on_ = true;
  heartbeat_thread_ = std::thread([this, interval] {
    absl::Time next = absl::Now();
    while (heartbeats_on_) {
      Heartbeat().IgnoreError();  // a coordinator restart; keep trying
      next += interval;
      const absl::Time now = absl::Now();
      if (next < now) next = now;
      while (heartbeats_on_ && absl::Now() < next) {
        absl::SleepFor(std::min(next - absl::Now(), absl::Milliseconds(20)));
      }
    }
  });
}

void SimWorker::StopHeartbeats() {
  heartbeats_on_ = false;
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void SimWorker::JoinJob() {
  if (job_thread_.joinable()) job_thread_.join();
}

grpc::Status SimWorker::Retry(
    const char* method,
    const std::function<grpc::Status(grpc::ClientContext*)>& call,
    absl::Duration deadline) {
  const absl::Time give_up = absl::Now() + options_.job_rpc_patience;
  if (deadline == absl::ZeroDuration()) deadline = options_.rpc_timeout;
  for (;;) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoMilliseconds(deadline));
    const absl::Time start = absl::Now();
    grpc::Status s = call(&ctx);
    if (sink_) sink_(method, absl::Now() - start);
    const bool transient = s.error_code() == grpc::StatusCode::UNAVAILABLE;
    if (!transient || abort_ || stop_ || absl::Now() > give_up) return s;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

void SimWorker::RunJob(v1::RunJobDirective run) {
  const std::string& job = run.job_id();
  const int64_t epoch = run.epoch();
  const int rank = run.rank();
  auto finish = [&](bool ok, const std::string& error) {
    if (!abort_) {
      v1::ReportResultRequest req;
      req.set_job_id(job);
      req.set_epoch(epoch);
      req.set_rank(rank);
      req.set_worker_id(id_);
      req.set_ok(ok);
      req.set_error(error);
      {
        absl::MutexLock lock(&mu_);
        req.set_final_step(step_);
      }
      v1::ReportResultResponse resp;
      Retry("ReportResult", [&](grpc::ClientContext* ctx) {
        return Stub()->ReportResult(ctx, req, &resp);
      }).IgnoreError();
    }
    if (ok) ++jobs_finished_;
    absl::MutexLock lock(&mu_);
    busy_ = false;
  };

  // Rendezvous: every rank publishes an address; every rank reads rank 0's.
  {
    v1::KvPutRequest req;
    req.set_job_id(job);
    req.set_epoch(epoch);
    req.set_key(absl::StrCat("addr/", rank));
    req.set_value(absl::StrCat(options_.host, ":", 10000 + rank));
    v1::KvPutResponse resp;
    grpc::Status s = Retry("KvPut", [&](grpc::ClientContext* ctx) {
      return Stub()->KvPut(ctx, req, &resp);
    });
    if (!s.ok()) return finish(false, "KvPut: " + s.error_message());
  }
  {
    v1::KvGetRequest req;
    req.set_job_id(job);
    req.set_epoch(epoch);
    req.set_key("addr/0");
    *req.mutable_timeout() = ToProto(absl::Seconds(5));
    v1::KvGetResponse resp;
    grpc::Status s = Retry("KvGet", [&](grpc::ClientContext* ctx) {
      return Stub()->KvGet(ctx, req, &resp);
    });
    if (!s.ok()) return finish(false, "KvGet: " + s.error_message());
  }
  // Bucket rebuild, through the worker's own client of the protocol (rank 0
  // sends the layout, the others its fingerprint and the layout only when
  // asked; the owners decoded as a worker does).
  {
    std::vector<v1::BucketLayout> buckets;
    for (size_t i = 0; i < options_.bucket_elements.size(); ++i) {
      v1::BucketLayout& b = buckets.emplace_back();
      b.set_index(static_cast<int>(i));
      const int n = std::max(1, options_.parameters_per_bucket);
      for (int p = 0; p < n; ++p) {
        v1::BucketParameter* param = b.add_parameters();
        param->set_name(absl::StrCat("layers.", i, ".p", p));
        param->set_num_elements(std::max<int64_t>(1, options_.bucket_elements[i] / n));
        param->set_dtype("F32");
      }
    }
    // One GetAssignment wait, a second short of the RPC deadline.
    const absl::Duration wait = options_.rpc_timeout - absl::Seconds(1);
    worker::AssignmentClientOptions client_options;
    client_options.job_id = job;
    client_options.epoch = epoch;
    client_options.rank = rank;
    client_options.world_size = run.world_size();
    client_options.worker_id = id_;
    client_options.rpc_timeout = options_.rpc_timeout;
    client_options.slice = wait;
    SimAssignmentRpcs rpcs(this);
    worker::AssignmentClient client(&rpcs, client_options);
    absl::StatusOr<worker::BucketAssignment> assignment =
        client.Exchange(buckets, wait, [this] {
          return abort_ || stop_ ? absl::AbortedError("aborted")
                                 : absl::OkStatus();
        });
    if (!assignment.ok()) {
      return finish(false, std::string(assignment.status().message()));
    }
  }
  if (rank == 1 && absl::StartsWith(run.spec().name(), options_.fail_prefix)) {
    return finish(false, "simulated failure on rank 1");
  }
  for (int64_t step = 1; step <= run.spec().steps(); ++step) {
    if (abort_ || stop_) return finish(false, "aborted");
    absl::SleepFor(options_.step_time);
    {
      absl::MutexLock lock(&mu_);
      step_ = step;
    }
    if (rank == 0 || step == run.spec().steps()) {
      v1::ReportProgressRequest req;
      req.set_job_id(job);
      req.set_epoch(epoch);
      req.set_rank(rank);
      req.set_worker_id(id_);
      req.mutable_progress()->set_step(step);
      req.mutable_progress()->set_loss(1.0 / step);
      *req.mutable_progress()->mutable_step_time() = ToProto(options_.step_time);
      v1::ReportProgressResponse resp;
      grpc::Status s = Retry("ReportProgress", [&](grpc::ClientContext* ctx) {
        return Stub()->ReportProgress(ctx, req, &resp);
      });
      if (s.ok() && resp.abort()) abort_ = true;
    }
  }
  finish(true, "");
}

}  // namespace bench
}  // namespace pshard
