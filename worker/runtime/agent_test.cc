#include "worker/runtime/agent.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "worker/runtime/fake_control_plane.h"

namespace pshard::worker {
namespace {

using ::pshard::testing::WaitUntil;

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

v1::Directive RunJob(const std::string& id, int64_t steps) {
  v1::Directive directive;
  v1::RunJobDirective* d = directive.mutable_run_job();
  d->set_job_id(id);
  d->set_epoch(1);
  d->set_rank(0);
  d->set_world_size(1);
  v1::JobSpec& spec = *d->mutable_spec();
  spec.set_name(id);
  spec.set_world_size(1);
  spec.mutable_synthetic()->set_num_parameters(1000);
  spec.set_bucket_cap_mb(25);
  spec.set_steps(steps);
  spec.set_progress_every(1);
  spec.set_collective_timeout_seconds(10);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  return directive;
}

// Every test drives one agent, started, against a one-worker fake
// coordinator; the agent is stopped when the test ends.
class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override { agent_.Start(); }
  void TearDown() override { agent_.Stop(absl::CancelledError("test over")); }

  FakeControlPlane control_{1};
  Agent agent_{&control_, Options()};
};

TEST_F(AgentTest, RunsJobFromHeartbeatAndReturnsToIdle) {
  ASSERT_TRUE(WaitUntil([&] { return control_.heartbeats() > 0; },
                        absl::Seconds(10)));
  EXPECT_EQ(agent_.Status().worker_id(), "w-alpha");
  EXPECT_EQ(agent_.Status().state(), v1::IDLE);
  control_.QueueDirective(RunJob("job-1", 3));
  ASSERT_TRUE(control_.WaitForResults(1, absl::Seconds(20)));
  EXPECT_TRUE(control_.results()[0].ok()) << control_.results()[0].error();
  ASSERT_TRUE(WaitUntil([&] { return agent_.Status().state() == v1::IDLE; },
                        absl::Seconds(10)));
  // Heartbeats carried BUSY with the job while it ran, or went straight
  // back to IDLE for this short job; never anything else.
  for (const auto& beat : control_.heartbeat_log()) {
    EXPECT_TRUE(beat.state() == v1::IDLE || beat.state() == v1::BUSY);
    EXPECT_EQ(beat.incarnation(), "inc-1");
  }
}

TEST_F(AgentTest, AbortDirectiveStopsTheJob) {
  control_.QueueDirective(RunJob("job-2", 100000000));
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = agent_.Status();
        return s.state() == v1::BUSY && s.step() > 2;
      },
      absl::Seconds(20)));
  v1::GetWorkerStatusResponse busy = agent_.Status();
  EXPECT_EQ(busy.job_id(), "job-2");
  EXPECT_EQ(busy.optimizer_state_bytes(), 1000 * 8);
  EXPECT_EQ(busy.owned_shards_size(), 1);
  v1::Directive abort;
  abort.mutable_abort_job()->set_job_id("job-2");
  abort.mutable_abort_job()->set_epoch(1);
  abort.mutable_abort_job()->set_reason("cancelled by user");
  const absl::Time start = absl::Now();
  control_.QueueDirective(abort);
  ASSERT_TRUE(control_.WaitForResults(1, absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_FALSE(control_.results()[0].ok());
  EXPECT_THAT(control_.results()[0].error(),
              ::testing::HasSubstr("cancelled by user"));
  ASSERT_TRUE(WaitUntil([&] { return agent_.Status().state() == v1::IDLE; },
                        absl::Seconds(10)));
}

TEST_F(AgentTest, NotFoundMakesItRegisterAgain) {
  ASSERT_TRUE(WaitUntil([&] { return control_.heartbeats() > 0; },
                        absl::Seconds(10)));
  EXPECT_EQ(control_.registrations(), 1);
  control_.FailNextHeartbeatWithNotFound();
  ASSERT_TRUE(WaitUntil([&] { return control_.registrations() == 2; },
                        absl::Seconds(10)));
}

TEST_F(AgentTest, DrainFinishesTheJobFirst) {
  control_.QueueDirective(RunJob("job-3", 20));
  v1::Directive drain;
  drain.mutable_drain();
  control_.QueueDirective(drain);
  EXPECT_TRUE(agent_.WaitForDrained(absl::Seconds(20)));
  ASSERT_EQ(control_.results().size(), 1u);
  EXPECT_TRUE(control_.results()[0].ok());
  EXPECT_EQ(control_.results()[0].final_step(), 20);
}

TEST_F(AgentTest, StopAbortsRunningJob) {
  control_.QueueDirective(RunJob("job-4", 100000000));
  ASSERT_TRUE(WaitUntil([&] { return agent_.Status().step() > 1; },
                        absl::Seconds(20)));
  const absl::Time start = absl::Now();
  agent_.Stop(absl::AbortedError("SIGTERM"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(control_.results().size(), 1u);
  EXPECT_THAT(control_.results()[0].error(), ::testing::HasSubstr("SIGTERM"));
}

// A second job handed over while the first is still winding down is not
// lost: it starts once the first one's thread has ended.
TEST_F(AgentTest, JobArrivingDuringWindDownIsStartedAfterwards) {
  control_.QueueDirective(RunJob("job-5", 5));
  control_.QueueDirective(RunJob("job-6", 5));  // same reply: job-5 is busy
  ASSERT_TRUE(control_.WaitForResults(2, absl::Seconds(20)));
  auto results = control_.results();
  EXPECT_EQ(results[0].job_id(), "job-5");
  EXPECT_EQ(results[1].job_id(), "job-6");
  EXPECT_TRUE(results[1].ok()) << results[1].error();
}

}  // namespace
}  // namespace pshard::worker
