// kill -9 the real pshard-coordinator and restart it on the same state file:
// jobs, events and assignments are intact, workers come back (same name,
// same id), a running job whose workers return continues to SUCCEEDED, and
// a queued job is still queued.
#include <signal.h>

#include <memory>
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

// The job's log as far as it goes now: WatchJob until it has been quiet for
// the read deadline (the job is not terminal, so the stream would not end).
std::vector<v1::JobEvent> Events(v1::JobService::Stub* stub, const std::string& id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  v1::WatchJobRequest req;
  req.set_job_id(id);
  auto reader = stub->WatchJob(&ctx, req);
  std::vector<v1::JobEvent> events;
  v1::JobEvent e;
  while (reader->Read(&e)) events.push_back(e);
  reader->Finish();
  return events;
}

TEST(RestartTest, KillNineAndRestartLosesNothing) {
  const std::string dir = testing::MakeTempDir("restart");
  ASSERT_OK_AND_ASSIGN(RunningCoordinator c, StartTestCoordinator(dir));
  auto jobs = v1::JobService::NewStub(c.Channel());

  std::vector<std::unique_ptr<bench::SimWorker>> workers;
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    bench::SimWorkerOptions options;
    options.name = absl::StrCat("sim-", i);
    options.step_time = absl::Milliseconds(20);
    workers.push_back(std::make_unique<bench::SimWorker>(c.Channel(), options));
    ASSERT_OK(workers.back()->Register());
    ids.push_back(workers.back()->id());
    workers.back()->StartHeartbeats(absl::Milliseconds(100));
  }
  // 150 steps of 20 ms: about 3 s of "training", across the restart.
  ASSERT_OK_AND_ASSIGN(v1::Job running, SubmitJob(jobs.get(), "long", 2, 150));
  ASSERT_OK_AND_ASSIGN(v1::Job queued, SubmitJob(jobs.get(), "big", 8, 10));
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        auto job = GetJob(jobs.get(), running.id());
        return job.ok() && job->state() == v1::RUNNING && job->progress().step() >= 5;
      },
      absl::Seconds(20)));
  ASSERT_OK_AND_ASSIGN(const v1::Job before, GetJob(jobs.get(), running.id()));
  const std::vector<v1::JobEvent> events_before = Events(jobs.get(), running.id());
  ASSERT_GE(events_before.size(), 3u);  // QUEUED, STARTING, RUNNING, ...
  v1::ShardAssignment assignment_before;
  {
    auto shards = v1::ShardService::NewStub(c.Channel());
    grpc::ClientContext ctx;
    v1::GetShardAssignmentRequest req;
    req.set_job_id(running.id());
    ASSERT_TRUE(shards->GetShardAssignment(&ctx, req, &assignment_before).ok());
  }

  // kill -9, then restart on the same file (same port, so the simulated
  // workers reconnect on their own, as a Kubernetes Service would make them).
  const int port = c.port;
  ASSERT_OK(c.process->Signal(SIGKILL));
  ASSERT_OK(c.process->Wait(absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(RunningCoordinator c2, StartTestCoordinator(dir, port));
  jobs = v1::JobService::NewStub(c2.Channel());

  ASSERT_OK_AND_ASSIGN(v1::Job q, GetJob(jobs.get(), queued.id()));
  EXPECT_EQ(q.state(), v1::QUEUED);
  EXPECT_EQ(q.spec().world_size(), 8);
  ASSERT_OK_AND_ASSIGN(v1::Job r, GetJob(jobs.get(), running.id()));
  EXPECT_EQ(r.epoch(), before.epoch());
  // Progress is durable as of the last progress event (they are throttled
  // to one a second), never older.
  int64_t last_logged_step = 0;
  for (const auto& e : events_before) {
    if (e.has_progress()) last_logged_step = e.progress().step();
  }
  EXPECT_GE(r.progress().step(), last_logged_step);
  const std::vector<v1::JobEvent> events_after = Events(jobs.get(), running.id());
  ASSERT_GE(events_after.size(), events_before.size());
  for (size_t i = 0; i < events_before.size(); ++i) {
    EXPECT_EQ(events_after[i].SerializeAsString(), events_before[i].SerializeAsString())
        << "event " << i + 1;
  }
  {
    auto shards = v1::ShardService::NewStub(c2.Channel());
    grpc::ClientContext ctx;
    v1::GetShardAssignmentRequest req;
    req.set_job_id(running.id());
    v1::ShardAssignment after;
    ASSERT_TRUE(shards->GetShardAssignment(&ctx, req, &after).ok());
    EXPECT_EQ(after.SerializeAsString(), assignment_before.SerializeAsString());
  }

  // The workers come back with the same ids and the job finishes.
  ASSERT_OK_AND_ASSIGN(r,
                       WaitForEnd(jobs.get(), running.id(), absl::Seconds(30)));
  EXPECT_EQ(r.state(), v1::SUCCEEDED) << r.reason();
  EXPECT_EQ(r.progress().step(), 150);
  EXPECT_EQ(r.epoch(), before.epoch());  // it continued; no restart needed
  auto cluster = v1::ClusterService::NewStub(c2.Channel());
  grpc::ClientContext ctx;
  v1::ListWorkersResponse resp;
  ASSERT_TRUE(cluster->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
  ASSERT_EQ(resp.workers_size(), 2);
  EXPECT_EQ(resp.workers(0).id(), ids[0]);
  EXPECT_EQ(resp.workers(1).id(), ids[1]);
  workers.clear();
}

}  // namespace
}  // namespace coordinator_test
}  // namespace pshard
