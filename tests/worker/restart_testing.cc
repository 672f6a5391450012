#include "tests/worker/restart_testing.h"

#include <signal.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard::testing {

v1::JobSpec MlpJobSpec(const MlpJob& job, const std::string& output_dir) {
  v1::JobSpec spec;
  spec.set_name(job.name);
  spec.set_world_size(2);
  auto* mlp = spec.mutable_mlp();
  mlp->set_input_dim(32);
  for (int d : job.hidden_dims) mlp->add_hidden_dims(d);
  mlp->set_output_dim(8);
  mlp->set_batch_size(job.batch_size);
  spec.set_bucket_cap_mb(job.bucket_cap_mb);
  spec.set_steps(job.steps);
  spec.set_seed(job.seed);
  if (job.progress_every > 0) spec.set_progress_every(job.progress_every);
  spec.set_collective_timeout_seconds(job.collective_timeout_seconds);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(job.lr);
  spec.set_output_dir(output_dir);
  return spec;
}

void CheckpointEvery10(Cluster& cluster, v1::JobSpec& spec) {
  spec.set_max_restarts(1);
  spec.mutable_checkpoint()->set_dir(
      absl::StrCat(cluster.dir(), "/ckpt-", spec.name()));
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep_last(2);
}

int WorkerIndexOfRank(Cluster& cluster, const v1::Job& job, int rank) {
  for (int i = 0; i < cluster.num_workers(); ++i) {
    auto status = cluster.WorkerStatus(i);
    if (status.ok() && status->job_id() == job.id() &&
        status->rank() == rank) {
      return i;
    }
  }
  return -1;
}

bool HasCompleteCheckpoint(const v1::Job& job) {
  for (const v1::CheckpointRecord& c : job.checkpoints()) {
    if (c.state() == v1::CheckpointRecord::COMPLETE) return true;
  }
  return false;
}

v1::Job RunAndKillRank(Cluster& cluster, const v1::JobSpec& spec, int rank,
                       absl::Duration* to_training) {
  absl::StatusOr<v1::Job> submitted = cluster.Submit(spec);
  EXPECT_OK(submitted);
  if (!submitted.ok()) return v1::Job();
  const std::string id = submitted->id();
  // The victim is found while the job runs, so that the kill can follow the
  // progress check at once.
  int victim = -1;
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto job = cluster.GetJob(id);
        if (!job.ok() || job->state() != v1::RUNNING) return false;
        victim = WorkerIndexOfRank(cluster, *job, rank);
        return victim >= 0;
      },
      absl::Seconds(30)))
      << cluster.Logs();
  if (victim < 0) return v1::Job();
  v1::Job running;
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto job = cluster.GetJob(id);
        if (!job.ok()) return false;
        running = *job;
        return IsTerminal(job->state()) ||
               (job->progress().step() >= 20 &&
                (!spec.has_checkpoint() || HasCompleteCheckpoint(*job)));
      },
      absl::Seconds(30)))
      << cluster.Logs();
  const absl::Time killed = absl::Now();
  EXPECT_OK(cluster.worker(victim).Signal(SIGKILL));
  EXPECT_FALSE(IsTerminal(running.state()))
      << "the job ended before the kill: " << running.reason();
  EXPECT_LT(running.progress().step(), spec.steps())
      << "the job ended before the kill";
  // Training again: the new epoch's assignment is published.
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto job = cluster.GetJob(id);
        return job.ok() && ((job->epoch() > running.epoch() &&
                             job->state() == v1::RUNNING) ||
                            IsTerminal(job->state()));
      },
      absl::Seconds(30)))
      << cluster.Logs();
  // Detection is the killed worker's Attach stream closing.
  const absl::Duration elapsed = absl::Now() - killed;
  if (to_training != nullptr) *to_training = elapsed;
  printf("kill -9 to training again (world_size %d, min_world_size %d%s): "
         "%.0f ms\n",
         spec.world_size(), spec.min_world_size(),
         spec.has_checkpoint() ? ", checkpoints" : "",
         absl::ToDoubleMilliseconds(elapsed));
  absl::StatusOr<v1::Job> ended = cluster.WaitForEnd(id, absl::Seconds(60));
  EXPECT_OK(ended);
  return ended.ok() ? *ended : v1::Job();
}

v1::Job RunToEnd(Cluster& cluster, const v1::JobSpec& spec, int idle_workers) {
  absl::StatusOr<v1::Job> submitted = cluster.Submit(spec);
  EXPECT_OK(submitted);
  if (!submitted.ok()) return v1::Job();
  absl::StatusOr<v1::Job> ended =
      cluster.WaitForEnd(submitted->id(), absl::Seconds(60));
  EXPECT_OK(ended);
  EXPECT_TRUE(cluster.WaitForIdle(idle_workers, absl::Seconds(10)))
      << cluster.Logs();
  return ended.ok() ? *ended : v1::Job();
}

std::vector<v1::JobEvent::Restart> RestartEvents(Cluster& cluster,
                                                 const std::string& id) {
  std::vector<v1::JobEvent::Restart> out;
  auto events = cluster.Events(id, absl::Seconds(10));
  EXPECT_OK(events);
  if (!events.ok()) return out;
  for (const v1::JobEvent& e : *events) {
    if (e.has_restart()) out.push_back(e.restart());
  }
  return out;
}

}  // namespace pshard::testing
