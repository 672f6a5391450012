#include "worker/runtime/engine_factory.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/runtime/assignment_client.h"
#include "worker/comm/kv_store.h"

namespace pshard::worker {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::SizeIs;

v1::JobSpec Spec(int world, v1::JobSpec::Backend backend) {
  v1::JobSpec spec;
  spec.set_name("t");
  spec.set_world_size(world);
  spec.set_backend(backend);
  spec.mutable_synthetic()->set_num_parameters(3000);
  spec.mutable_synthetic()->set_tensor_numel(1000);
  spec.set_bucket_cap_mb(0.004);
  spec.set_steps(2);
  spec.set_collective_timeout_seconds(20);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  return ApplyJobSpecDefaults(spec);
}

StepEngineOptions Options(int rank, int world) {
  StepEngineOptions options;
  options.job_id = "job-1";
  options.epoch = 1;
  options.rank = rank;
  options.world_size = world;
  options.timeout = absl::Seconds(20);
  return options;
}

// Owners computed here, as every rank would get them from the coordinator.
AssignmentProvider LocalOwners(int world) {
  return LocalAssignmentProvider(v1::JobSpec::BALANCED, world);
}

TEST(EngineFactoryTest, NcclOnACpuWorkerIsRefused) {
  InMemoryKvStore kv;
  EXPECT_THAT(CreateStepEngine(Spec(1, v1::JobSpec::NCCL), Options(0, 1), kv,
                               LocalOwners(1)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("this worker runs on the CPU")));
}

// Two CPU ranks as threads over loopback Gloo: the engine's steps, the loss
// average and the final barrier.
TEST(EngineFactoryTest, CpuRanksStepAverageTheirLossAndMeetAtTheEnd) {
  constexpr int kWorld = 2;
  InMemoryKvStore kv;
  std::vector<absl::Status> statuses(kWorld);
  std::vector<double> averages(kWorld);
  std::vector<std::vector<std::vector<float>>> params(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      statuses[r] = [&]() -> absl::Status {
        ASSIGN_OR_RETURN(std::unique_ptr<StepEngine> engine,
                         CreateStepEngine(Spec(kWorld, v1::JobSpec::AUTO),
                                          Options(r, kWorld), kv,
                                          LocalOwners(kWorld)));
        if (engine->communicator().world_size() != kWorld ||
            engine->communicator().rank() != r) {
          return absl::InternalError("the engine's communicator is not ours");
        }
        for (int64_t step = 1; step <= 2; ++step) {
          RETURN_IF_ERROR(engine->RunStep(step).status());
        }
        // Rank r's loss r + 1: the average of 1 and 2.
        ASSIGN_OR_RETURN(averages[r], engine->AverageLoss(r + 1.0));
        RETURN_IF_ERROR(engine->FinalBarrier());
        ASSIGN_OR_RETURN(params[r], engine->DownloadParameters());
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_THAT(statuses, Each(IsOk()));
  EXPECT_THAT(averages, Each(1.5));
  // Every rank holds the same updated parameters.
  ASSERT_THAT(params[0], SizeIs(3));
  EXPECT_EQ(params[0], params[1]);
}

TEST(EngineFactoryTest, OneCpuRankAveragesNothing) {
  InMemoryKvStore kv;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StepEngine> engine,
                       CreateStepEngine(Spec(1, v1::JobSpec::GLOO),
                                        Options(0, 1), kv, LocalOwners(1)));
  ASSERT_OK(engine->RunStep(1).status());
  ASSERT_OK_AND_ASSIGN(double loss, engine->AverageLoss(0.25));
  EXPECT_EQ(loss, 0.25);
  EXPECT_OK(engine->FinalBarrier());
}

}  // namespace
}  // namespace pshard::worker
