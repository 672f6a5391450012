#include "worker/workload/workload.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

TEST(CreateWorkloadTest, BuildsTheNamedWorkload) {
  v1::JobSpec spec;
  spec.set_seed(3);
  spec.mutable_mlp()->set_input_dim(4);
  spec.mutable_mlp()->add_hidden_dims(8);
  spec.mutable_mlp()->set_output_dim(2);
  spec.mutable_mlp()->set_batch_size(16);
  ASSERT_OK_AND_ASSIGN(auto mlp, CreateWorkload(spec, 1, 2));
  EXPECT_EQ(mlp->parameters().size(), 4u);
  EXPECT_EQ(mlp->samples_per_step(), 16);

  spec.mutable_synthetic()->set_num_parameters(100);
  spec.mutable_synthetic()->set_tensor_numel(30);
  ASSERT_OK_AND_ASSIGN(auto synthetic, CreateWorkload(spec, 0, 1));
  EXPECT_EQ(synthetic->parameters().size(), 4u);
  EXPECT_EQ(synthetic->parameters()[3].name, "t3");

  spec.mutable_replay()->set_params_path("/nonexistent/params.safetensors");
  spec.mutable_replay()->set_gradients_dir("/nonexistent");
  EXPECT_THAT(CreateWorkload(spec, 0, 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/params")));
}

TEST(CreateWorkloadTest, RejectsBadRankAndMissingWorkload) {
  v1::JobSpec spec;
  EXPECT_THAT(CreateWorkload(spec, 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no workload")));
  spec.mutable_synthetic()->set_num_parameters(10);
  EXPECT_THAT(CreateWorkload(spec, 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2")));
  EXPECT_THAT(CreateWorkload(spec, -1, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank -1")));
}

}  // namespace
}  // namespace pshard::worker
