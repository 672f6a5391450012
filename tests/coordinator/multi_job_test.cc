// Several jobs at once on the real pshard-coordinator binary, driven by
// simulated workers over real gRPC on loopback: gang scheduling onto
// disjoint workers, a failing rank, a lost worker, and every worker back in
// the pool at the end.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/coordinator/sim_worker.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "tests/coordinator/helpers.h"

namespace pshard {
namespace coordinator_test {
namespace {

using ::testing::HasSubstr;

TEST(MultiJobTest, JobsShareThePoolFailCleanlyAndReturnWorkers) {
  const std::string dir = testing::MakeTempDir("multi_job");
  ASSERT_OK_AND_ASSIGN(RunningCoordinator c, StartTestCoordinator(dir));
  auto channel = c.Channel();
  auto jobs = v1::JobService::NewStub(channel);

  std::vector<std::unique_ptr<bench::SimWorker>> workers;
  for (int i = 0; i < 6; ++i) {
    bench::SimWorkerOptions options;
    options.name = absl::StrCat("sim-", i);
    options.host = i < 3 ? "host-a" : "host-b";
    options.step_time = absl::Milliseconds(2);
    workers.push_back(std::make_unique<bench::SimWorker>(channel, options));
    ASSERT_OK(workers.back()->Register());
    workers.back()->StartHeartbeats(absl::Milliseconds(100));
  }

  ASSERT_OK_AND_ASSIGN(v1::Job a, SubmitJob(jobs.get(), "alpha", 3, 50));
  ASSERT_OK_AND_ASSIGN(v1::Job b, SubmitJob(jobs.get(), "beta", 2, 30));
  ASSERT_OK_AND_ASSIGN(v1::Job f, SubmitJob(jobs.get(), "fail-gamma", 2, 30));
  ASSERT_OK_AND_ASSIGN(v1::Job d, SubmitJob(jobs.get(), "delta", 6, 20));
  const std::vector<std::string> ids = {a.id(), b.id(), f.id(), d.id()};

  // delta needs every worker, so it starts only after the others released
  // theirs; meanwhile alpha, beta and fail-gamma fit at once (3+2 of 6, then
  // fail-gamma after one of them ends).
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        for (const auto& id : ids) {
          auto job = GetJob(jobs.get(), id);
          if (!job.ok() || !IsTerminal(job->state())) return false;
        }
        return true;
      },
      absl::Seconds(45)));

  ASSERT_OK_AND_ASSIGN(a, GetJob(jobs.get(), a.id()));
  ASSERT_OK_AND_ASSIGN(b, GetJob(jobs.get(), b.id()));
  ASSERT_OK_AND_ASSIGN(f, GetJob(jobs.get(), f.id()));
  ASSERT_OK_AND_ASSIGN(d, GetJob(jobs.get(), d.id()));
  EXPECT_EQ(a.state(), v1::SUCCEEDED) << a.reason();
  EXPECT_EQ(b.state(), v1::SUCCEEDED) << b.reason();
  EXPECT_EQ(d.state(), v1::SUCCEEDED) << d.reason();
  EXPECT_EQ(f.state(), v1::FAILED);
  EXPECT_THAT(f.reason(), HasSubstr("rank 1 (worker w-"));
  EXPECT_THAT(f.reason(), HasSubstr("simulated failure"));
  EXPECT_EQ(a.progress().step(), 50);
  // alpha's three ranks sit on one host (grouped by host).
  std::set<std::string> alpha_hosts;
  for (const auto& m : a.members()) alpha_hosts.insert(m.host());
  EXPECT_EQ(alpha_hosts.size(), 1u);
  // alpha and beta ran at the same time on disjoint workers.
  std::set<std::string> used;
  for (const auto& m : a.members()) used.insert(m.worker_id());
  for (const auto& m : b.members()) used.insert(m.worker_id());
  EXPECT_EQ(used.size(), 5u);
  // delta (all six workers) started only after alpha and beta ended.
  EXPECT_GE(d.start_time().seconds() * 1000000000 + d.start_time().nanos(),
            b.start_time().seconds() * 1000000000 + b.start_time().nanos());
  // Every assignment was published and covers all buckets.
  auto shards = v1::ShardService::NewStub(channel);
  for (const auto& id : {a.id(), b.id(), d.id()}) {
    grpc::ClientContext ctx;
    v1::GetShardAssignmentRequest req;
    req.set_job_id(id);
    v1::ShardAssignment out;
    ASSERT_TRUE(shards->GetShardAssignment(&ctx, req, &out).ok()) << id;
    EXPECT_EQ(out.buckets_size(), 3);
  }

  // A worker that stops heartbeating fails its job within the timeout; the
  // survivors go back to the pool.
  ASSERT_OK_AND_ASSIGN(v1::Job slow, SubmitJob(jobs.get(), "slow", 2, 1000000));
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        auto job = GetJob(jobs.get(), slow.id());
        return job.ok() && job->state() == v1::RUNNING;
      },
      absl::Seconds(20)));
  ASSERT_OK_AND_ASSIGN(slow, GetJob(jobs.get(), slow.id()));
  const std::string victim = slow.members(1).worker_id();
  for (auto& w : workers) {
    if (w->id() == victim) w->StopHeartbeats();
  }
  ASSERT_OK_AND_ASSIGN(slow,
                       WaitForEnd(jobs.get(), slow.id(), absl::Seconds(10)));
  EXPECT_EQ(slow.state(), v1::FAILED);
  EXPECT_THAT(slow.reason(), HasSubstr(absl::StrCat("worker ", victim, " (rank 1) lost")));

  auto cluster = v1::ClusterService::NewStub(channel);
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        grpc::ClientContext ctx;
        v1::ListWorkersRequest req;
        req.set_include_lost(true);
        v1::ListWorkersResponse resp;
        if (!cluster->ListWorkers(&ctx, req, &resp).ok()) return false;
        int idle = 0, lost = 0;
        for (const auto& w : resp.workers()) {
          idle += w.state() == v1::IDLE;
          lost += w.state() == v1::LOST;
        }
        return idle == 5 && lost == 1;
      },
      absl::Seconds(10)));
  workers.clear();
  ASSERT_OK(c.process->Signal(SIGTERM));
  ASSERT_OK_AND_ASSIGN(int status, c.process->Wait(absl::Seconds(10)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace coordinator_test
}  // namespace pshard
