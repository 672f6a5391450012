// WorkerControl over in-process gRPC: the worker protocol end to end
// (register, heartbeat directives, rendezvous, layout, assignment, progress,
// result), the hand-encoded heartbeat reply, bad input, and many parked waits.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "shard/layout.h"
#include "shard/layout_fingerprint.h"
#include "server/services_test_fixture.h"

namespace pshard {
namespace server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

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

  // KvGetMany waits for every key, and answers in the keys' order.
  v1::KvGetManyResponse many;
  grpc::Status many_status;
  std::thread many_getter([&] {
    grpc::ClientContext ctx;
    v1::KvGetManyRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.add_keys("mesh/1");
    req.add_keys("gloo/rank0");
    *req.mutable_timeout() = Millis(20000);
    many_status = control_->KvGetMany(&ctx, req, &many);
  });
  {
    grpc::ClientContext ctx;
    v1::KvPutResponse resp;
    ASSERT_TRUE(
        control_->KvPut(&ctx, MakeKvPut(job, "mesh/1", "m1"), &resp).ok());
  }
  many_getter.join();
  ASSERT_TRUE(many_status.ok()) << many_status.error_message();
  EXPECT_THAT(many.values(), ElementsAre("m1", "127.0.0.1:5555"));
  {
    grpc::ClientContext ctx;
    v1::KvGetManyRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    v1::KvGetManyResponse resp;
    const grpc::Status none = control_->KvGetMany(&ctx, req, &resp);
    EXPECT_EQ(none.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(none.error_message(), HasSubstr("keys: must be 1.."));
  }

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

// Heartbeat replies are encoded by hand (RunJob's spec is shared bytes): the AbortJob reply and the RunJob that
// follows once the worker is free must parse as the typed messages.
TEST_F(ServicesTest, HeartbeatRepliesWithAbortAndRunJobParse) {
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
  // The worker is RELEASING: the abort comes alone, the next job waits until the worker says it is free.
  v1::HeartbeatResponse r2 = beat(v1::BUSY, first.id(), 1);
  ASSERT_EQ(r2.directives_size(), 1);
  EXPECT_EQ(r2.directives(0).abort_job().job_id(), first.id());
  EXPECT_EQ(r2.directives(0).abort_job().epoch(), 1);
  beat(v1::IDLE, "", 0);  // it stopped: free now, and the next job is placed on it
  v1::HeartbeatResponse r3 = beat(v1::IDLE, "", 0);
  ASSERT_EQ(r3.directives_size(), 1);
  const v1::RunJobDirective& run = r3.directives(0).run_job();
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

}  // namespace
}  // namespace server
}  // namespace pshard
