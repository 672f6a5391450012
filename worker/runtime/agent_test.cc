// The agent against the real coordinator (tests/testing's
// InProcessCoordinator): jobs reach it the way they reach a deployed worker,
// submitted and placed by the coordinator and handed over on heartbeat
// replies.
#include "worker/runtime/agent.h"

#include <memory>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/in_process_coordinator.h"
#include "tests/testing/subprocess.h"
#include "worker/runtime/intercepting_control_plane.h"

namespace pshard::worker {
namespace {

using ::pshard::testing::InProcessCoordinator;
using ::pshard::testing::WaitUntil;
using ::testing::HasSubstr;

AgentOptions Options() {
  AgentOptions options;
  options.name = "alpha";
  options.incarnation = "inc-1";
  options.address = "127.0.0.1:1";
  options.host = "127.0.0.1";
  options.gloo_hostname = "127.0.0.1";
  options.rpc_timeout = absl::Seconds(2);
  return options;
}

v1::JobSpec Spec(const std::string& name, int64_t steps) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(1);
  spec.mutable_synthetic()->set_num_parameters(1000);
  spec.set_bucket_cap_mb(25);
  spec.set_steps(steps);
  spec.set_progress_every(1);
  spec.set_collective_timeout_seconds(10);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  return spec;
}

// Every test drives one agent, started, as the only worker of a real
// coordinator; the agent is stopped when the test ends.
class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(coordinator_, InProcessCoordinator::Start());
    control_ = std::make_unique<InterceptingControlPlane>(NewGrpcControlPlane(
        coordinator_->Channel(), "the in-process coordinator"));
    agent_ = std::make_unique<Agent>(control_.get(), Options());
    agent_->Start();
  }
  void TearDown() override {
    if (agent_) agent_->Stop(absl::CancelledError("test over"));
  }

  // Submits a one-rank job; returns its id.
  std::string Submit(const std::string& name, int64_t steps) {
    absl::StatusOr<v1::Job> job = coordinator_->SubmitJob(Spec(name, steps));
    EXPECT_OK(job);
    return job.ok() ? job->id() : "";
  }

  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::unique_ptr<InterceptingControlPlane> control_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(AgentTest, RunsJobFromHeartbeatAndReturnsToIdle) {
  ASSERT_TRUE(control_->WaitForHeartbeats(1, absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo me, coordinator_->GetWorker("alpha"));
  EXPECT_EQ(agent_->Status().worker_id(), me.id());
  EXPECT_EQ(agent_->Status().state(), v1::IDLE);
  const std::string id = Submit("job-1", 3);
  ASSERT_TRUE(control_->WaitForResults(1, absl::Seconds(20)));
  EXPECT_TRUE(control_->results()[0].ok()) << control_->results()[0].error();
  EXPECT_EQ(control_->results()[0].job_id(), id);
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->WaitForJobState(
                                        id, v1::SUCCEEDED, absl::Seconds(10)));
  EXPECT_EQ(job.progress().step(), 3);
  ASSERT_TRUE(WaitUntil([&] { return agent_->Status().state() == v1::IDLE; },
                        absl::Seconds(10)));
  // Heartbeats carried BUSY with the job while it ran, or went straight
  // back to IDLE for this short job; never anything else.
  for (const auto& beat : control_->heartbeat_log()) {
    EXPECT_TRUE(beat.state() == v1::IDLE || beat.state() == v1::BUSY);
    EXPECT_EQ(beat.incarnation(), "inc-1");
  }
}

TEST_F(AgentTest, AbortDirectiveStopsTheJob) {
  // No progress reports, whose replies would say abort first (without the
  // reason): the AbortJob directive on a heartbeat reply stops this job.
  v1::JobSpec spec = Spec("job-2", 100000000);
  spec.set_progress_every(spec.steps());
  ASSERT_OK_AND_ASSIGN(v1::Job submitted, coordinator_->SubmitJob(spec));
  const std::string id = submitted.id();
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = agent_->Status();
        return s.state() == v1::BUSY && s.step() > 2;
      },
      absl::Seconds(20)));
  v1::GetWorkerStatusResponse busy = agent_->Status();
  EXPECT_EQ(busy.job_id(), id);
  EXPECT_EQ(busy.optimizer_state_bytes(), 1000 * 8);
  EXPECT_EQ(busy.owned_shards_size(), 1);
  // CancelJob sends AbortJob on the agent's next heartbeat.
  const absl::Time start = absl::Now();
  ASSERT_OK(coordinator_->CancelJob(id, "cancelled by user").status());
  ASSERT_TRUE(control_->WaitForResults(1, absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_FALSE(control_->results()[0].ok());
  EXPECT_THAT(control_->results()[0].error(), HasSubstr("cancelled by user"));
  ASSERT_TRUE(WaitUntil([&] { return agent_->Status().state() == v1::IDLE; },
                        absl::Seconds(10)));
}

// The coordinator loses the agent (no heartbeat for worker_timeout, in fake
// time): the next heartbeat is answered NOT_FOUND and the agent registers
// again, under the same id.
TEST_F(AgentTest, NotFoundMakesItRegisterAgain) {
  ASSERT_TRUE(control_->WaitForHeartbeats(1, absl::Seconds(10)));
  // The first registration's stream is in before the loss (else the loss
  // refuses it, and only the second registration's attach comes in).
  ASSERT_TRUE(control_->WaitForAttachments(1, absl::Seconds(10)));
  EXPECT_EQ(control_->registrations(), 1);
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo before, coordinator_->GetWorker("alpha"));
  coordinator_->AdvanceAndTick(coordinator_->options().worker_timeout +
                               absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo lost, coordinator_->GetWorker("alpha"));
  EXPECT_EQ(lost.state(), v1::LOST);
  ASSERT_TRUE(control_->WaitForRegistrations(2, absl::Seconds(10)));
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<v1::WorkerInfo> w = coordinator_->GetWorker("alpha");
        return w.ok() && w->state() == v1::IDLE;
      },
      absl::Seconds(10)));
  EXPECT_EQ(control_->registrations(), 2);
  EXPECT_TRUE(WaitUntil(
      [&] { return agent_->Status().worker_id() == before.id(); },
      absl::Seconds(10)))
      << agent_->Status().worker_id();
  // The new registration is attached too.
  EXPECT_TRUE(control_->WaitForAttachments(2, absl::Seconds(10)));
}

// The agent holds an Attach stream; when it stops, the stream ends and the
// coordinator makes the worker LOST at once (the fake clock never moves, so
// no heartbeat timeout can explain it).
TEST_F(AgentTest, AttachesAndItsEndMakesTheWorkerLost) {
  ASSERT_TRUE(control_->WaitForAttachments(1, absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo attached,
                       coordinator_->GetWorker("alpha"));
  EXPECT_EQ(attached.state(), v1::IDLE);
  const absl::Time start = absl::Now();
  agent_->Stop(absl::CancelledError("test over"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<v1::WorkerInfo> w = coordinator_->GetWorker("alpha");
        return w.ok() && w->state() == v1::LOST;
      },
      absl::Seconds(10)));
  EXPECT_EQ(control_->attachments(), 1);
}

// The coordinator does not send Drain (DrainWorker only stops scheduling),
// so the directive is injected, riding with the RunJob as it may.
TEST_F(AgentTest, DrainFinishesTheJobFirst) {
  v1::Directive drain;
  drain.mutable_drain();
  control_->AppendToNextRunJobReply(drain);
  const std::string id = Submit("job-3", 20);
  EXPECT_TRUE(agent_->WaitForDrained(absl::Seconds(20)));
  ASSERT_EQ(control_->results().size(), 1u);
  EXPECT_TRUE(control_->results()[0].ok());
  EXPECT_EQ(control_->results()[0].final_step(), 20);
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(id));
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
}

// Drain() is the worker's own drain (pshard-worker on SIGTERM with
// --shutdown_grace): an idle agent is drained at once, and the coordinator
// hears DRAINING and gives it nothing more.
TEST_F(AgentTest, DrainItselfWhenIdleIsDrainedAtOnce) {
  ASSERT_TRUE(control_->WaitForHeartbeats(1, absl::Seconds(10)));
  agent_->Drain();
  EXPECT_TRUE(agent_->WaitForDrained(absl::ZeroDuration()));
  EXPECT_EQ(agent_->Status().state(), v1::DRAINING);
  EXPECT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<v1::WorkerInfo> w = coordinator_->GetWorker("alpha");
        return w.ok() && w->state() == v1::DRAINING;
      },
      absl::Seconds(10)));
  // A job submitted now waits: its only worker is draining.
  const std::string id = Submit("job-5", 3);
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(id));
  EXPECT_NE(job.state(), v1::RUNNING);
  const size_t beats = control_->heartbeat_log().size();
  ASSERT_TRUE(control_->WaitForHeartbeats(beats + 2, absl::Seconds(10)));
  EXPECT_EQ(agent_->Status().job_id(), "");
  EXPECT_TRUE(control_->results().empty());
}

// A busy agent's own drain lets the job run to its end: it reports DRAINING
// with the job meanwhile, and is drained once the job has succeeded.
TEST_F(AgentTest, DrainItselfWhenBusyFinishesTheJobFirst) {
  // The job's result waits until a heartbeat has said DRAINING with the
  // job: a short job cannot end before the agent has reported it.
  control_->HoldResults();
  const std::string id = Submit("job-6", 200);
  ASSERT_TRUE(WaitUntil([&] { return agent_->Status().step() >= 1; },
                        absl::Seconds(20)));
  agent_->Drain();
  EXPECT_EQ(agent_->Status().state(), v1::DRAINING);
  const bool reported_draining = WaitUntil(
      [&] {
        for (const auto& beat : control_->heartbeat_log()) {
          if (beat.state() == v1::DRAINING && beat.job_id() == id) return true;
        }
        return false;
      },
      absl::Seconds(20));
  control_->ReleaseResults();
  EXPECT_TRUE(reported_draining);
  EXPECT_TRUE(agent_->WaitForDrained(absl::Seconds(60)));
  ASSERT_EQ(control_->results().size(), 1u);
  EXPECT_TRUE(control_->results()[0].ok()) << control_->results()[0].error();
  EXPECT_EQ(control_->results()[0].final_step(), 200);
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->WaitForJobState(
                                        id, v1::SUCCEEDED, absl::Seconds(10)));
}

TEST_F(AgentTest, StopAbortsRunningJob) {
  Submit("job-4", 100000000);
  ASSERT_TRUE(WaitUntil([&] { return agent_->Status().step() > 1; },
                        absl::Seconds(20)));
  const absl::Time start = absl::Now();
  agent_->Stop(absl::AbortedError("SIGTERM"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(control_->results().size(), 1u);
  EXPECT_THAT(control_->results()[0].error(), HasSubstr("SIGTERM"));
  // The worker stopping is not the job's fault: a restart may go on elsewhere.
  EXPECT_EQ(control_->results()[0].cause(), v1::FAILURE_CAUSE_WORKER);
}

// Two jobs for the only worker: the coordinator hands over the second as
// soon as the first rank reported ok, typically while the first job's
// thread is still winding down. Neither is lost and both succeed.
TEST_F(AgentTest, JobArrivingDuringWindDownIsStartedAfterwards) {
  const std::string first = Submit("job-5", 5);
  const std::string second = Submit("job-6", 5);
  ASSERT_TRUE(control_->WaitForResults(2, absl::Seconds(20)));
  auto results = control_->results();
  EXPECT_EQ(results[0].job_id(), first);
  EXPECT_EQ(results[1].job_id(), second);
  EXPECT_TRUE(results[0].ok()) << results[0].error();
  EXPECT_TRUE(results[1].ok()) << results[1].error();
  ASSERT_OK(coordinator_->WaitForJobState(second, v1::SUCCEEDED,
                                          absl::Seconds(10))
                .status());
}

}  // namespace
}  // namespace pshard::worker
