// End to end: the mlp workload on 2 worker processes learns (loss after 100
// steps below half the initial loss), and the WorkerStatus service shows
// each rank's owned shards.
#include <cmath>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace pshard::testing {
namespace {

TEST(MlpE2eTest, TwoWorkersHalveTheLossIn100Steps) {
  ClusterOptions options;
  options.workers = 2;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  // Every worker serves gRPC health.
  EXPECT_OK(cluster->WorkerHealth(0));
  EXPECT_OK(cluster->WorkerHealth(1));
  EXPECT_OK(cluster->WorkerHealth(0, "pshard.v1.WorkerStatus"));
  EXPECT_FALSE(cluster->WorkerHealth(0, "pshard.v1.NoSuchService").ok());
  v1::JobSpec spec;
  spec.set_name("mlp");
  spec.set_world_size(2);
  auto* mlp = spec.mutable_mlp();
  mlp->set_input_dim(32);
  mlp->add_hidden_dims(64);
  mlp->add_hidden_dims(64);
  mlp->set_output_dim(8);
  mlp->set_batch_size(64);
  spec.set_bucket_cap_mb(0.01);
  spec.set_steps(100);
  spec.set_seed(3);
  spec.set_progress_every(1);
  spec.set_collective_timeout_seconds(20);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.003);
  ASSERT_OK_AND_ASSIGN(v1::Job submitted, cluster->Submit(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job job,
                       cluster->WaitForEnd(submitted.id(), absl::Seconds(40)));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
  EXPECT_EQ(job.progress().step(), 100);

  ASSERT_OK_AND_ASSIGN(auto events,
                       cluster->Events(submitted.id(), absl::Seconds(10)));
  double first = NAN, last = NAN;
  int64_t first_step = 0;
  for (const auto& e : events) {
    if (!e.has_progress()) continue;
    if (std::isnan(first)) {
      first = e.progress().loss();
      first_step = e.progress().step();
    }
    last = e.progress().loss();
  }
  // Progress is sent without blocking the steps, so an early report may be
  // coalesced; the first one seen must still be from the first few steps.
  ASSERT_FALSE(std::isnan(first));
  EXPECT_LE(first_step, 5);
  EXPECT_GT(first, 0);
  EXPECT_LT(last, first / 2) << "loss went from " << first << " to " << last;
  EXPECT_GT(job.progress().samples_per_second(), 0);
  EXPECT_GT(job.progress().bytes_sent(), 0);
}

}  // namespace
}  // namespace pshard::testing
