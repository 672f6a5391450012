#include "worker/api/trainer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/fake_communicator.h"
#include "worker/runtime/assignment_client.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// The coordinator's two calls: records the layout reports and publishes the
// owners it was given.
class PublishingRpcs : public AssignmentRpcs {
 public:
  explicit PublishingRpcs(std::vector<int> owners) : owners_(std::move(owners)) {}

  absl::StatusOr<v1::ReportBucketsResponse> ReportBuckets(
      const v1::ReportBucketsRequest& request, absl::Duration) override {
    reports.push_back(request);
    return v1::ReportBucketsResponse();
  }
  absl::StatusOr<v1::ShardAssignment> GetAssignment(
      const v1::GetAssignmentRequest& request, absl::Duration) override {
    v1::ShardAssignment assignment;
    assignment.set_job_id(request.job_id());
    assignment.set_epoch(request.epoch());
    for (size_t b = 0; b < owners_.size(); ++b) {
      v1::BucketAssignment* bucket = assignment.add_buckets();
      bucket->set_index(static_cast<int>(b));
      bucket->set_owner_rank(owners_[b]);
    }
    return assignment;
  }

  std::vector<v1::ReportBucketsRequest> reports;

 private:
  const std::vector<int> owners_;
};

std::vector<ParameterInfo> TwoParameters() {
  return {{"w", {4, 2}, 8}, {"b", {4}, 4}};
}

// One step, gradients ready in reverse registration order.
absl::Status OneStep(Trainer& trainer) {
  for (int i = trainer.num_parameters() - 1; i >= 0; --i) {
    for (float& g : trainer.gradient(i)) g = 0.5f;
    absl::Status ready = trainer.GradientReady(i);
    if (!ready.ok()) return ready;
  }
  return trainer.FinishStep();
}

TrainerOptions SmallBuckets() {
  TrainerOptions options;
  // One bucket per parameter.
  options.optimizer.set_kind(v1::OptimizerSpec::SGD);
  options.optimizer.mutable_hyper_parameters()->set_lr(0.1);
  options.bucket_cap_mb = 1e-6;
  options.timeout = absl::Seconds(30);
  return options;
}

TEST(TrainerTest, LocalModeComputesTheOwnersItself) {
  FakeHub hub(1);
  std::unique_ptr<Communicator> comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                       Trainer::Create(comm.get(), TwoParameters(),
                                       SmallBuckets()));
  ASSERT_OK(OneStep(*trainer));
  EXPECT_EQ(trainer->step(), 1);
  EXPECT_EQ(trainer->num_buckets(), 2);
  EXPECT_THAT(trainer->owned_buckets(), ElementsAre(0, 1));
}

// options.precision: bf16 parameters and fp32 gradients in the buffers, the
// owner stepping fp32 masters from the fp32 initial values (SGD lr 1 on
// gradients -2^-9: below half a bf16 step at 1, yet the rounded model
// moves once the masters have).
TEST(TrainerTest, Bf16ParametersStepFp32Masters) {
  FakeHub hub(1);
  std::unique_ptr<Communicator> comm = hub.Create(0);
  TrainerOptions options = SmallBuckets();
  options.optimizer.mutable_hyper_parameters()->set_lr(1);
  options.precision = MixedPrecision{DataType::kBFloat16, DataType::kFloat32};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                       Trainer::Create(comm.get(), {{"w", {3}, 3}}, options));
  EXPECT_THAT(trainer->parameter(0), SizeIs(0));  // not fp32
  const std::vector<float> start(3, 1.0f + 1.0f / 1024);
  ASSERT_OK(trainer->session().SetParameterValues(0, start));
  auto widened = [&] {
    const auto* bits = static_cast<const uint16_t*>(trainer->parameter_data(0));
    std::vector<float> out(3);
    for (int i = 0; i < 3; ++i) {
      const uint32_t word = static_cast<uint32_t>(bits[i]) << 16;
      std::memcpy(&out[i], &word, sizeof(word));
    }
    return out;
  };
  EXPECT_THAT(widened(), ::testing::Each(1.0f));
  for (int step = 1; step <= 2; ++step) {
    auto* grads = static_cast<float*>(trainer->gradient_data(0));
    std::fill(grads, grads + 3, -1.0f / 512);
    ASSERT_OK(trainer->GradientReady(0));
    ASSERT_OK(trainer->FinishStep());
  }
  // Masters 1 + 5/1024: nearest bf16 1 + 1/128.
  EXPECT_THAT(widened(), ::testing::Each(1.0f + 1.0f / 128));
}

TEST(TrainerTest, CoordinatorModeGoesThroughTheAssignmentClient) {
  FakeHub hub(1);
  std::unique_ptr<Communicator> comm = hub.Create(0);
  FakeClock clock;
  PublishingRpcs rpcs({0, 0});
  AssignmentClientOptions client_options;
  client_options.job_id = "job-1";
  client_options.epoch = 2;
  client_options.rank = 0;
  client_options.world_size = 1;
  client_options.worker_id = "w0";
  client_options.clock = &clock;
  AssignmentClient client(&rpcs, client_options);
  TrainerOptions options = SmallBuckets();
  options.assignment_client = &client;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                       Trainer::Create(comm.get(), TwoParameters(), options));
  ASSERT_OK(OneStep(*trainer));
  EXPECT_THAT(trainer->owned_buckets(), ElementsAre(0, 1));
  // The observed layout went to the coordinator: bucket 0 holds the last
  // parameter (ready first).
  ASSERT_THAT(rpcs.reports, SizeIs(1));
  ASSERT_THAT(rpcs.reports[0].buckets(), SizeIs(2));
  EXPECT_EQ(rpcs.reports[0].buckets(0).parameters(0).name(), "b");
  EXPECT_EQ(rpcs.reports[0].buckets(1).parameters(0).name(), "w");
  EXPECT_EQ(rpcs.reports[0].job_id(), "job-1");
  // Later steps ask nothing more.
  ASSERT_OK(OneStep(*trainer));
  EXPECT_THAT(rpcs.reports, SizeIs(1));
}

TEST(TrainerTest, AnAssignmentClientOfAnotherRankIsRefused) {
  FakeHub hub(1);
  std::unique_ptr<Communicator> comm = hub.Create(0);
  PublishingRpcs rpcs({0});
  AssignmentClientOptions client_options;
  client_options.rank = 1;
  client_options.world_size = 2;
  AssignmentClient client(&rpcs, client_options);
  TrainerOptions options = SmallBuckets();
  options.assignment_client = &client;
  EXPECT_THAT(Trainer::Create(comm.get(), TwoParameters(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 1 of 2")));
}

TEST(TrainerTest, OpenJoinsAsTheEnvironmentSaysAndCloses) {
  // The local test mode (world 1): the same Session the C API opens.
  SessionEnvironment env;
  env.local_store = ::testing::TempDir() + "/trainer-open";
  ASSERT_EQ(mkdir(env.local_store.c_str(), 0700), 0);
  env.timeout = absl::Seconds(30);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                       Trainer::Open(env, TwoParameters(), SmallBuckets()));
  for (float& p : trainer->parameter(0)) p = 1;
  ASSERT_OK(OneStep(*trainer));
  // SGD, lr 0.1, gradient 0.5 (one rank: the mean is itself).
  for (float p : trainer->parameter(0)) EXPECT_FLOAT_EQ(p, 0.95f);
  EXPECT_EQ(trainer->step(), 1);
  EXPECT_THAT(trainer->owned_buckets(), ElementsAre(0, 1));
  ASSERT_OK(trainer->Close());
  EXPECT_THAT(trainer->FinishStep(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("closed")));
}

TEST(TrainerTest, OpenRefusesAnAssignmentClient) {
  PublishingRpcs rpcs({0});
  AssignmentClient client(&rpcs, AssignmentClientOptions());
  TrainerOptions options = SmallBuckets();
  options.assignment_client = &client;
  EXPECT_THAT(Trainer::Open(SessionEnvironment(), TwoParameters(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("assignment_client is for Create")));
}

TEST(TrainerTest, BadParametersAndOptimizerAreRefused) {
  FakeHub hub(1);
  std::unique_ptr<Communicator> comm = hub.Create(0);
  EXPECT_THAT(Trainer::Create(comm.get(), {{"w", {2, 2}, 5}}, SmallBuckets()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("match its shape")));
  EXPECT_THAT(Trainer::Create(comm.get(), {{"w", {4}, 4}, {"w", {4}, 4}},
                              SmallBuckets()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("registered twice")));
  EXPECT_THAT(Trainer::Create(comm.get(), {}, SmallBuckets()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no parameters")));
  TrainerOptions no_lr = SmallBuckets();
  no_lr.optimizer.mutable_hyper_parameters()->clear_lr();
  EXPECT_THAT(Trainer::Create(comm.get(), TwoParameters(), no_lr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr")));
}

}  // namespace
}  // namespace pshard::worker
