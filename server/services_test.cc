// In-process gRPC tests of every RPC of the coordinator, including bad input,
// deadlines, cancellation and many concurrent waiters. The server runs on the
// real clock; waits use short deadlines rather than sleeps.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "common/clock.h"
#include "common/proto_time.h"
#include "coordinator/coordinator.h"
#include "shard/layout.h"
#include "shard/layout_fingerprint.h"
#include "coordinator/state_store.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "server/coordinator_server.h"

namespace pshard {
namespace server {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Spec(int world_size) {
  v1::JobSpec spec;
  spec.set_name("grpc-test");
  spec.set_world_size(world_size);
  spec.mutable_synthetic()->set_num_parameters(1000);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  spec.set_steps(5);
  return spec;
}

google::protobuf::Duration Millis(int64_t ms) {
  return ToProto(absl::Milliseconds(ms));
}

v1::KvGetRequest MakeKvGet(const v1::Job& job, const std::string& key,
                           int64_t timeout_ms) {
  v1::KvGetRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_key(key);
  *req.mutable_timeout() = Millis(timeout_ms);
  return req;
}

v1::KvPutRequest MakeKvPut(const v1::Job& job, const std::string& key,
                           const std::string& value) {
  v1::KvPutRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_key(key);
  req.set_value(value);
  return req;
}

class ServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = coordinator::StateStore::Open(":memory:");
    ASSERT_OK(store);
    coordinator::CoordinatorOptions options;
    options.worker_timeout = absl::Seconds(60);  // no loss during a test
    auto c = coordinator::Coordinator::Create(options, &clock_, *std::move(store));
    ASSERT_OK(c);
    coordinator_ = *std::move(c);
    ServerOptions server_options;
    server_options.listen = "127.0.0.1:0";
    server_options.tick_interval = absl::Milliseconds(10);
    server_options.services.max_watchers = 4;
    server_options.services.watch_poll = absl::Milliseconds(100);
    auto s = CoordinatorServer::Start(coordinator_.get(), &clock_, server_options);
    ASSERT_OK(s);
    server_ = *std::move(s);
    channel_ = server_->InProcessChannel();
    jobs_ = v1::JobService::NewStub(channel_);
    shards_ = v1::ShardService::NewStub(channel_);
    cluster_ = v1::ClusterService::NewStub(channel_);
    control_ = v1::WorkerControl::NewStub(channel_);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::Milliseconds(200));
    server_.reset();
    coordinator_.reset();
  }

  std::string Register(const std::string& name) {
    grpc::ClientContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_incarnation("inc");
    req.set_host("h");
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(control_->RegisterWorker(&ctx, req, &resp).ok());
    return resp.worker_id();
  }

  v1::Job Submit(int world_size) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(world_size);
    v1::Job job;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  v1::Job Get(const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(jobs_->GetJob(&ctx, req, &job).ok());
    return job;
  }

  // CancelJob(job_id, reason); `out` may be null.
  grpc::Status Cancel(const std::string& job_id, const std::string& reason = "",
                      v1::Job* out = nullptr) {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    req.set_reason(reason);
    v1::Job job;
    return jobs_->CancelJob(&ctx, req, out != nullptr ? out : &job);
  }

  grpc::Status GetShards(const std::string& job_id, v1::ShardAssignment* out) {
    grpc::ClientContext ctx;
    v1::GetShardAssignmentRequest req;
    req.set_job_id(job_id);
    return shards_->GetShardAssignment(&ctx, req, out);
  }

  v1::ReportBucketsRequest Layout(const v1::Job& job, int rank, int64_t n) {
    v1::ReportBucketsRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_rank(rank);
    req.set_worker_id(job.members(rank).worker_id());
    auto* b = req.add_buckets();
    b->set_index(0);
    auto* p = b->add_parameters();
    p->set_name("w");
    p->set_num_elements(n);
    p->set_dtype("F32");
    return req;
  }

  RealClock clock_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ShardService::Stub> shards_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
  std::unique_ptr<v1::WorkerControl::Stub> control_;
};

TEST_F(ServicesTest, SubmitGetListCancel) {
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(0);
    v1::Job job;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("world_size"));
  }
  {
    grpc::ClientContext ctx;
    v1::Job job;
    grpc::Status s = jobs_->SubmitJob(&ctx, v1::SubmitJobRequest(), &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::Job job = Submit(2);
  EXPECT_EQ(job.id(), "job-1");
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.spec().assignment_policy(), v1::JobSpec::BALANCED);
  EXPECT_EQ(Get(job.id()).state(), v1::QUEUED);
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("job-99");
    v1::Job out;
    EXPECT_EQ(jobs_->GetJob(&ctx, req, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.add_states(v1::QUEUED);
    v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->ListJobs(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.jobs_size(), 1);
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_limit(-3);
    v1::ListJobsResponse resp;
    EXPECT_EQ(jobs_->ListJobs(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.add_states(static_cast<v1::JobState>(42));
    v1::ListJobsResponse resp;
    EXPECT_EQ(jobs_->ListJobs(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(Cancel(job.id(), std::string(2000, 'r')).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    v1::Job out;
    ASSERT_TRUE(Cancel(job.id(), "changed my mind", &out).ok());
    EXPECT_EQ(out.state(), v1::CANCELLED);
  }
  EXPECT_EQ(Cancel(job.id()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Cancel("nope").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServicesTest, WatchJobStreamsUntilTerminal) {
  v1::Job job = Submit(1);
  std::vector<v1::JobEvent> events;
  absl::Notification first;
  std::thread watcher([&] {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id(job.id());
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::JobEvent e;
    while (reader->Read(&e)) {
      events.push_back(e);
      if (!first.HasBeenNotified()) first.Notify();
    }
    EXPECT_TRUE(reader->Finish().ok());
  });
  ASSERT_TRUE(first.WaitForNotificationWithTimeout(absl::Seconds(10)));
  Register("a");  // starts the job
  ASSERT_TRUE(Cancel(job.id()).ok());
  watcher.join();
  ASSERT_EQ(events.size(), 3u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].sequence(), i + 1);
  EXPECT_EQ(events[1].state_change().to(), v1::STARTING);
  EXPECT_EQ(events[2].state_change().to(), v1::CANCELLED);

  // Replay from a sequence number on an ended job: the rest, then the end.
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_job_id(job.id());
  req.set_after_sequence(2);
  auto reader = jobs_->WatchJob(&ctx, req);
  v1::JobEvent e;
  ASSERT_TRUE(reader->Read(&e));
  EXPECT_EQ(e.sequence(), 3);
  EXPECT_FALSE(reader->Read(&e));
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(ServicesTest, WatchJobErrorsAndClientCancel) {
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id("job-404");
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::JobEvent e;
    EXPECT_FALSE(reader->Read(&e));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id("job-1");
    req.set_after_sequence(-1);
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::JobEvent e;
    EXPECT_FALSE(reader->Read(&e));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::Job job = Submit(3);  // stays QUEUED: no workers
  // Clients that go away free their stream: with max_watchers = 4, ten
  // watch-and-leave rounds only pass if the server ends every stream (it
  // notices within one watch_poll, so a round may have to retry briefly).
  for (int round = 0; round < 10; ++round) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    bool watched = false;
    while (!watched && absl::Now() < deadline) {
      grpc::ClientContext ctx;
      v1::WatchJobRequest req;
      req.set_job_id(job.id());
      auto reader = jobs_->WatchJob(&ctx, req);
      v1::JobEvent e;
      if (!reader->Read(&e)) {
        EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
        absl::SleepFor(absl::Milliseconds(20));  // poll interval, not a sync point
        continue;
      }
      watched = true;
      ctx.TryCancel();
      while (reader->Read(&e)) {
      }
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    }
    ASSERT_TRUE(watched) << "round " << round << ": streams were not freed";
  }
}

TEST_F(ServicesTest, WatchJobIsCapped) {
  v1::Job job = Submit(3);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> readers;
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    v1::WatchJobRequest req;
    req.set_job_id(job.id());
    readers.push_back(jobs_->WatchJob(contexts.back().get(), req));
    v1::JobEvent e;
    ASSERT_TRUE(readers.back()->Read(&e));
  }
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_job_id(job.id());
  auto reader = jobs_->WatchJob(&ctx, req);
  v1::JobEvent e;
  EXPECT_FALSE(reader->Read(&e));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : readers) {
    while (r->Read(&e)) {
    }
    r->Finish();
  }
}

TEST_F(ServicesTest, WorkerProtocolEndToEnd) {
  const std::string a = Register("a");
  const std::string b = Register("b");
  EXPECT_EQ(a, "w-1");
  v1::Job job = Submit(2);
  job = Get(job.id());
  ASSERT_EQ(job.state(), v1::STARTING);

  // Heartbeat carries RunJob.
  {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    req.set_worker_id(a);
    req.set_incarnation("inc");
    req.set_state(v1::IDLE);
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(control_->Heartbeat(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.directives_size(), 1);
    EXPECT_EQ(resp.directives(0).run_job().job_id(), job.id());
    EXPECT_EQ(resp.directives(0).run_job().spec().name(), "grpc-test");
    EXPECT_EQ(resp.directives(0).run_job().members_size(), 0);
  }
  // KvGet blocks until another rank puts the key.
  v1::KvGetResponse got;
  grpc::Status get_status;
  std::thread getter([&] {
    grpc::ClientContext ctx;
    const v1::KvGetRequest req = MakeKvGet(job, "gloo/rank0", 20000);
    get_status = control_->KvGet(&ctx, req, &got);
  });
  {
    grpc::ClientContext ctx;
    const v1::KvPutRequest req = MakeKvPut(job, "gloo/rank0", "127.0.0.1:5555");
    v1::KvPutResponse resp;
    ASSERT_TRUE(control_->KvPut(&ctx, req, &resp).ok());
  }
  getter.join();
  ASSERT_TRUE(get_status.ok()) << get_status.error_message();
  EXPECT_EQ(got.value(), "127.0.0.1:5555");

  // GetAssignment blocks until both layouts are in.
  v1::ShardAssignment assignment;
  grpc::Status assignment_status;
  std::thread waiter([&] {
    grpc::ClientContext ctx;
    v1::GetAssignmentRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    *req.mutable_timeout() = Millis(20000);
    assignment_status = control_->GetAssignment(&ctx, req, &assignment);
  });
  // Rank 1 reports by fingerprint: unknown before rank 0's full report,
  // accepted after it.
  auto by_fingerprint = [&](v1::ReportBucketsResponse* resp) {
    grpc::ClientContext ctx;
    v1::ReportBucketsRequest req = Layout(job, 1, 256);
    req.set_layout_fingerprint(shard::LayoutFingerprint(req.buckets()));
    req.clear_buckets();
    return control_->ReportBuckets(&ctx, req, resp);
  };
  {
    v1::ReportBucketsResponse resp;
    ASSERT_TRUE(by_fingerprint(&resp).ok());
    EXPECT_TRUE(resp.send_layout());
  }
  {
    grpc::ClientContext ctx;
    v1::ReportBucketsResponse resp;
    ASSERT_TRUE(control_->ReportBuckets(&ctx, Layout(job, 0, 256), &resp).ok());
    EXPECT_FALSE(resp.send_layout());
  }
  {
    v1::ReportBucketsResponse resp;
    ASSERT_TRUE(by_fingerprint(&resp).ok());
    EXPECT_FALSE(resp.send_layout());
  }
  waiter.join();
  ASSERT_TRUE(assignment_status.ok()) << assignment_status.error_message();
  EXPECT_EQ(assignment.epoch(), job.epoch());
  EXPECT_EQ(assignment.total_bytes(), 1024);
  {
    v1::ShardAssignment out;
    ASSERT_TRUE(GetShards(job.id(), &out).ok());
    EXPECT_EQ(out.buckets(0).owner_rank(), 0);
    // What a rank asks for: the owners view.
    grpc::ClientContext ctx;
    v1::GetAssignmentRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_view(v1::ASSIGNMENT_VIEW_OWNERS);
    v1::ShardAssignment owners;
    ASSERT_TRUE(control_->GetAssignment(&ctx, req, &owners).ok());
    EXPECT_EQ(owners.SerializeAsString(),
              shard::OwnersView(out).SerializeAsString());
    EXPECT_EQ(owners.ranks_size(), 0);
  }
  // A stale epoch is refused.
  {
    grpc::ClientContext ctx;
    v1::GetAssignmentRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch() - 1);
    v1::ShardAssignment out;
    grpc::Status s = control_->GetAssignment(&ctx, req, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(), HasSubstr("stale"));
  }
  // Progress and results.
  {
    grpc::ClientContext ctx;
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_rank(0);
    req.set_worker_id(job.members(0).worker_id());
    req.mutable_progress()->set_step(2);
    req.mutable_progress()->set_loss(1.5);
    v1::ReportProgressResponse resp;
    ASSERT_TRUE(control_->ReportProgress(&ctx, req, &resp).ok());
    EXPECT_FALSE(resp.abort());
    EXPECT_EQ(Get(job.id()).progress().step(), 2);
  }
  {
    grpc::ClientContext ctx;
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_rank(7);
    v1::ReportProgressResponse resp;
    EXPECT_EQ(control_->ReportProgress(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  for (int r = 0; r < 2; ++r) {
    grpc::ClientContext ctx;
    v1::ReportResultRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_rank(r);
    req.set_worker_id(job.members(r).worker_id());
    req.set_ok(true);
    req.set_final_step(5);
    v1::ReportResultResponse resp;
    ASSERT_TRUE(control_->ReportResult(&ctx, req, &resp).ok());
  }
  EXPECT_EQ(Get(job.id()).state(), v1::SUCCEEDED);
  {
    grpc::ClientContext ctx;
    v1::ReportResultRequest req;
    req.set_job_id("job-404");
    v1::ReportResultResponse resp;
    EXPECT_EQ(control_->ReportResult(&ctx, req, &resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  // ListWorkers.
  {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(cluster_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
    ASSERT_EQ(resp.workers_size(), 2);
    EXPECT_EQ(resp.workers(0).state(), v1::IDLE);
    EXPECT_EQ(resp.workers(1).id(), b);
  }
}

// Heartbeat replies are encoded by hand (RunJob's spec is shared bytes): a reply with AbortJob, then RunJob must parse as the typed
// message.
TEST_F(ServicesTest, HeartbeatReplyWithAbortAndRunJobParses) {
  const std::string a = Register("a");
  v1::Job first = Get(Submit(1).id());
  auto beat = [&](v1::WorkerState state, const std::string& job, int64_t epoch) {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    req.set_worker_id(a);
    req.set_incarnation("inc");
    req.set_state(state);
    req.set_job_id(job);
    req.set_epoch(epoch);
    v1::HeartbeatResponse resp;
    grpc::Status s = control_->Heartbeat(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  };
  v1::HeartbeatResponse r1 = beat(v1::IDLE, "", 0);
  ASSERT_EQ(r1.directives_size(), 1);
  ASSERT_EQ(r1.directives(0).run_job().job_id(), first.id());
  beat(v1::BUSY, first.id(), 1);  // acknowledged
  v1::Job second = Submit(1);
  ASSERT_TRUE(Cancel(first.id()).ok());
  v1::HeartbeatResponse r2 = beat(v1::BUSY, first.id(), 1);
  ASSERT_EQ(r2.directives_size(), 2);
  EXPECT_EQ(r2.directives(0).abort_job().job_id(), first.id());
  EXPECT_EQ(r2.directives(0).abort_job().epoch(), 1);
  const v1::RunJobDirective& run = r2.directives(1).run_job();
  EXPECT_EQ(run.job_id(), second.id());
  EXPECT_EQ(run.epoch(), 1);
  EXPECT_EQ(run.rank(), 0);
  EXPECT_EQ(run.world_size(), 1);
  EXPECT_EQ(run.spec().name(), "grpc-test");
  EXPECT_EQ(run.members_size(), 0);
  // And a malformed request is refused, not crashed on.
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice garbage(std::string("\xff\xff\xff"));
  grpc::ByteBuffer request(&garbage, 1);
  grpc::ByteBuffer response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/pshard.v1.WorkerControl/Heartbeat", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServicesTest, WorkerControlBadInput) {
  {
    grpc::ClientContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_name("has space");
    req.set_incarnation("i");
    v1::RegisterWorkerResponse resp;
    grpc::Status s = control_->RegisterWorker(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("name"));
  }
  {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    req.set_worker_id("w-1");
    v1::HeartbeatResponse resp;
    EXPECT_EQ(control_->Heartbeat(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  Register("a");
  v1::Job job = Get(Submit(1).id());
  {
    grpc::ClientContext ctx;
    const v1::KvPutRequest req = MakeKvPut(job, std::string(600, 'k'), "");
    v1::KvPutResponse resp;
    EXPECT_EQ(control_->KvPut(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // Over the 16 MiB message cap: refused before any handler runs.
    grpc::ClientContext ctx;
    const v1::KvPutRequest req = MakeKvPut(job, "big", std::string(17 << 20, 'v'));
    v1::KvPutResponse resp;
    EXPECT_EQ(control_->KvPut(&ctx, req, &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    grpc::ClientContext ctx;
    const v1::KvGetRequest req = MakeKvGet(job, "k", -5);
    v1::KvGetResponse resp;
    EXPECT_EQ(control_->KvGet(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // The request's timeout.
    grpc::ClientContext ctx;
    const v1::KvGetRequest req = MakeKvGet(job, "never", 50);
    v1::KvGetResponse resp;
    EXPECT_EQ(control_->KvGet(&ctx, req, &resp).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    // The client's deadline, shorter than the request's timeout.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(50));
    v1::GetAssignmentRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    *req.mutable_timeout() = Millis(60000);
    v1::ShardAssignment resp;
    EXPECT_EQ(control_->GetAssignment(&ctx, req, &resp).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    // A client that cancels its wait once the coordinator has parked it;
    // the server then ends the parked wait too. (The waits above have
    // ended by their deadlines first.)
    ASSERT_TRUE(coordinator_->WaitForPendingWaits(0, absl::Seconds(10)));
    grpc::ClientContext ctx;
    const v1::KvGetRequest req = MakeKvGet(job, "never", 60000);
    v1::KvGetResponse resp;
    std::thread canceller([&] {
      EXPECT_TRUE(coordinator_->WaitForPendingWaits(1, absl::Seconds(10)));
      ctx.TryCancel();
    });
    EXPECT_EQ(control_->KvGet(&ctx, req, &resp).error_code(), grpc::StatusCode::CANCELLED);
    canceller.join();
    EXPECT_TRUE(coordinator_->WaitForPendingWaits(0, absl::Seconds(10)));
  }
  {
    grpc::ClientContext ctx;
    v1::ReportBucketsRequest req = Layout(job, 0, 4);
    req.set_epoch(job.epoch() + 3);
    v1::ReportBucketsResponse resp;
    EXPECT_EQ(control_->ReportBuckets(&ctx, req, &resp).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext ctx;
    v1::ReportBucketsRequest req = Layout(job, 0, 4);
    req.mutable_buckets(0)->mutable_parameters(0)->set_name(std::string(300, 'n'));
    v1::ReportBucketsResponse resp;
    grpc::Status s = control_->ReportBuckets(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("rank 0 (worker w-1)"));
  }
  EXPECT_EQ(Get(job.id()).state(), v1::FAILED);
  v1::ShardAssignment out;
  EXPECT_EQ(GetShards(job.id(), &out).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(GetShards("job-404", &out).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Many parked waits hold no threads: status RPCs keep answering quickly.
TEST_F(ServicesTest, ManyWaitersDoNotStarveTheServer) {
  Register("a");
  v1::Job job = Get(Submit(1).id());
  constexpr int kWaiters = 500;
  struct Call {
    grpc::ClientContext ctx;
    v1::KvGetRequest req;
    v1::KvGetResponse resp;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Call>> calls(kWaiters);
  std::atomic<int> done{0};
  absl::Notification all_done;
  for (auto& call : calls) {
    call = std::make_unique<Call>();
    call->req.set_job_id(job.id());
    call->req.set_epoch(job.epoch());
    call->req.set_key("late");
    *call->req.mutable_timeout() = Millis(30000);
    control_->async()->KvGet(&call->ctx, &call->req, &call->resp,
                             [&, c = call.get()](grpc::Status s) {
                               c->status = s;
                               if (++done == kWaiters) all_done.Notify();
                             });
  }
  // While they wait, status RPCs are served.
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(cluster_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
  }
  EXPECT_EQ(done.load(), 0);
  grpc::ClientContext ctx;
  v1::KvPutRequest put;
  put.set_job_id(job.id());
  put.set_epoch(job.epoch());
  put.set_key("late");
  put.set_value("v");
  v1::KvPutResponse put_resp;
  ASSERT_TRUE(control_->KvPut(&ctx, put, &put_resp).ok());
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  for (auto& call : calls) {
    EXPECT_TRUE(call->status.ok()) << call->status.error_message();
    EXPECT_EQ(call->resp.value(), "v");
  }
}

TEST_F(ServicesTest, ListWorkersAndListJobsPage) {
  for (int i = 0; i < 5; ++i) Register(absl::StrCat("pod-", i));
  std::vector<std::string> ids;
  std::string token;
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::ListWorkersRequest req;
    req.set_page_size(2);
    req.set_page_token(token);
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(cluster_->ListWorkers(&ctx, req, &resp).ok());
    for (const auto& w : resp.workers()) ids.push_back(w.id());
    token = resp.next_page_token();
  } while (!token.empty() && ++pages < 10);
  EXPECT_THAT(ids, ::testing::ElementsAre("w-1", "w-2", "w-3", "w-4", "w-5"));
  for (int i = 0; i < 3; ++i) Submit(9);  // stay QUEUED
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(2);
    v1::ListJobsResponse first;
    ASSERT_TRUE(jobs_->ListJobs(&ctx, req, &first).ok());
    ASSERT_EQ(first.jobs_size(), 2);
    EXPECT_EQ(first.jobs(0).id(), "job-3");
    grpc::ClientContext ctx2;
    req.set_page_token(first.next_page_token());
    v1::ListJobsResponse second;
    ASSERT_TRUE(jobs_->ListJobs(&ctx2, req, &second).ok());
    ASSERT_EQ(second.jobs_size(), 1);
    EXPECT_EQ(second.jobs(0).id(), "job-1");
    EXPECT_EQ(second.next_page_token(), "");
    // `limit` still sizes the page for clients written before paging.
    grpc::ClientContext ctx3;
    v1::ListJobsRequest old;
    old.set_limit(1);
    v1::ListJobsResponse one;
    ASSERT_TRUE(jobs_->ListJobs(&ctx3, old, &one).ok());
    EXPECT_EQ(one.jobs_size(), 1);
    EXPECT_NE(one.next_page_token(), "");
  }
  // Bad sizes and tokens.
  auto workers_status = [&](int size, const std::string& token) {
    grpc::ClientContext ctx;
    v1::ListWorkersRequest req;
    req.set_page_size(size);
    req.set_page_token(token);
    v1::ListWorkersResponse resp;
    return cluster_->ListWorkers(&ctx, req, &resp);
  };
  grpc::Status s = workers_status(-1, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_size"));
  s = workers_status(0, "not-a-token");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_token"));
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(-2);
    v1::ListJobsResponse resp;
    EXPECT_EQ(jobs_->ListJobs(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_F(ServicesTest, DrainAndUndrainWorker) {
  const std::string a = Register("pod-a");
  {
    grpc::ClientContext ctx;
    v1::DrainWorkerRequest req;
    req.set_worker("pod-a");
    v1::WorkerInfo info;
    ASSERT_TRUE(cluster_->DrainWorker(&ctx, req, &info).ok());
    EXPECT_EQ(info.id(), a);
    EXPECT_EQ(info.state(), v1::DRAINING);
    EXPECT_TRUE(info.drain_requested());
  }
  {
    // Visible in ListWorkers.
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(cluster_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
    ASSERT_EQ(resp.workers_size(), 1);
    EXPECT_EQ(resp.workers(0).state(), v1::DRAINING);
  }
  v1::Job job = Submit(1);
  EXPECT_EQ(Get(job.id()).state(), v1::QUEUED);
  {
    grpc::ClientContext ctx;
    v1::UndrainWorkerRequest req;
    req.set_worker(a);
    v1::WorkerInfo info;
    ASSERT_TRUE(cluster_->UndrainWorker(&ctx, req, &info).ok());
    EXPECT_FALSE(info.drain_requested());
    EXPECT_EQ(info.state(), v1::BUSY);
  }
  EXPECT_EQ(Get(job.id()).state(), v1::STARTING);
  {
    grpc::ClientContext ctx;
    v1::GetWorkerRequest req;
    req.set_worker(a);
    v1::WorkerInfo info;
    ASSERT_TRUE(cluster_->GetWorker(&ctx, req, &info).ok());
    EXPECT_EQ(info.job_id(), job.id());
  }
  {
    grpc::ClientContext ctx;
    v1::DrainWorkerRequest req;
    req.set_worker("pod-nope");
    v1::WorkerInfo info;
    grpc::Status s = cluster_->DrainWorker(&ctx, req, &info);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("no worker \"pod-nope\""));
  }
}

TEST_F(ServicesTest, HealthServiceAnswers) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace server
}  // namespace pshard
