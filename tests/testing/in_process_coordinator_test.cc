#include "tests/testing/in_process_coordinator.h"

#include <memory>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/job.grpc.pb.h"

namespace pshard::testing {
namespace {

using ::testing::HasSubstr;

// Five steps of a small Adam job on `world_size` ranks.
v1::JobSpec Spec(int world_size) {
  v1::JobSpec spec;
  spec.set_world_size(world_size);
  spec.set_steps(5);
  spec.set_name("harness");
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_synthetic()->set_num_parameters(4096);
  return spec;
}

TEST(InProcessCoordinatorTest, SimulatedWorkersRunAJobToTheEnd) {
  ASSERT_OK_AND_ASSIGN(auto c, InProcessCoordinator::Start());
  ASSERT_OK_AND_ASSIGN(std::vector<v1::RunJobDirective> ranks,
                       c->StartJob(Spec(2)));
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].rank(), 0);
  EXPECT_EQ(ranks[1].rank(), 1);
  EXPECT_EQ(ranks[1].world_size(), 2);
  EXPECT_EQ(ranks[0].spec().name(), "harness");
  const std::string id = ranks[0].job_id();
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->GetJob(id));
  EXPECT_EQ(job.state(), v1::STARTING);

  ASSERT_OK(c->ReportLayout(ranks, {4 << 20, 2 << 20, 1 << 20, 1 << 20}));
  ASSERT_OK_AND_ASSIGN(job, c->GetJob(id));
  EXPECT_EQ(job.state(), v1::RUNNING);
  v1::JobProgress p;
  p.set_step(5);
  p.set_total_steps(5);
  ASSERT_OK_AND_ASSIGN(v1::ReportProgressResponse reply,
                       c->ReportProgress(ranks[0], p));
  EXPECT_FALSE(reply.abort());
  ASSERT_OK(c->ReportResult(ranks[0], absl::OkStatus(), 5, "/out/p"));
  ASSERT_OK(c->ReportResult(ranks[1], absl::OkStatus(), 5));
  ASSERT_OK_AND_ASSIGN(job,
                       c->WaitForJobState(id, v1::SUCCEEDED, absl::Seconds(10)));
  EXPECT_EQ(job.output_path(), "/out/p");
  EXPECT_EQ(job.progress().step(), 5);

  ASSERT_OK_AND_ASSIGN(std::vector<v1::JobEvent> events, c->Events(id));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().to(), v1::SUCCEEDED);
}

TEST(InProcessCoordinatorTest, TimeMovesOnlyWhenTheTestAdvancesIt) {
  ASSERT_OK_AND_ASSIGN(auto c, InProcessCoordinator::Start());
  ASSERT_OK_AND_ASSIGN(std::vector<v1::RunJobDirective> ranks,
                       c->StartJob(Spec(1)));
  ASSERT_OK(c->ReportLayout(ranks, {4 << 20}));
  const std::string id = ranks[0].job_id();
  // Not a heartbeat since: still fine just before the timeout...
  c->AdvanceAndTick(c->options().worker_timeout - absl::Milliseconds(1));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->GetJob(id));
  EXPECT_EQ(job.state(), v1::RUNNING);
  // ...and lost, with its job, once the timeout has passed.
  c->AdvanceAndTick(absl::Milliseconds(2));
  ASSERT_OK_AND_ASSIGN(job, c->GetJob(id));
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("lost"));
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo w, c->GetWorker("sim-0"));
  EXPECT_EQ(w.state(), v1::LOST);
}

TEST(InProcessCoordinatorTest, CallsOnItsChannelAreRecorded) {
  ASSERT_OK_AND_ASSIGN(auto c, InProcessCoordinator::Start());
  auto stub = v1::JobService::NewStub(c->Channel());
  EXPECT_EQ(c->rpc_log().calls("SubmitJob"), 0);
  grpc::ClientContext context;
  v1::SubmitJobRequest request;
  *request.mutable_spec() = Spec(3);
  v1::Job job;
  ASSERT_TRUE(stub->SubmitJob(&context, request, &job).ok());
  EXPECT_EQ(c->rpc_log().calls("SubmitJob"), 1);
  EXPECT_TRUE(c->rpc_log().WaitForReceived("SubmitJob", 1, absl::Seconds(5)));
  std::optional<v1::SubmitJobRequest> last =
      c->rpc_log().LastRequest<v1::SubmitJobRequest>("SubmitJob");
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->spec().world_size(), 3);
  // The harness's own calls are not recorded.
  ASSERT_OK(c->GetJob(job.id()).status());
  EXPECT_EQ(c->rpc_log().calls("GetJob"), 0);
  // Three workers are not there: the job waits.
  EXPECT_EQ(job.state(), v1::QUEUED);
}

TEST(InProcessCoordinatorTest, ChosenCallsFailWithoutReachingTheCoordinator) {
  ASSERT_OK_AND_ASSIGN(auto c, InProcessCoordinator::Start());
  auto stub = v1::JobService::NewStub(c->Channel());
  c->FailNextCall("SubmitJob", absl::ResourceExhaustedError("injected"));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = Spec(1);
  v1::Job job;
  {
    grpc::ClientContext context;
    grpc::Status status = stub->SubmitJob(&context, request, &job);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(status.error_message(), "injected");
  }
  EXPECT_EQ(c->rpc_log().calls("SubmitJob"), 1);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> jobs, c->ListJobs());
  EXPECT_TRUE(jobs.empty());
  // Only the next call: the one after goes through.
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->SubmitJob(&context, request, &job).ok());
  }
  ASSERT_OK_AND_ASSIGN(jobs, c->ListJobs());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id(), job.id());
}

TEST(InProcessCoordinatorTest, RunPlacedJobsRunsWhatTheWorkersWereGiven) {
  ASSERT_OK_AND_ASSIGN(auto c, InProcessCoordinator::Start());
  ASSERT_OK(c->RegisterSimulatedWorkers(3).status());
  v1::JobSpec spec = Spec(2);
  spec.set_output_dir("/out");
  ASSERT_OK_AND_ASSIGN(v1::Job placed, c->SubmitJob(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job queued, c->SubmitJob(spec));  // one worker left
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> ran, c->RunPlacedJobs());
  EXPECT_THAT(ran, ::testing::ElementsAre(placed.id()));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->GetJob(placed.id()));
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  EXPECT_EQ(job.progress().step(), 5);
  EXPECT_EQ(job.output_path(), "/out/params.safetensors");
  // The freed workers take the next job on the next round.
  ASSERT_OK_AND_ASSIGN(ran, c->RunPlacedJobs());
  EXPECT_THAT(ran, ::testing::ElementsAre(queued.id()));
}

}  // namespace
}  // namespace pshard::testing
