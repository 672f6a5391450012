#include "checkpoint/spec_fingerprint.h"

#include <string>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard::checkpoint {
namespace {

v1::JobSpec MlpSpec() {
  v1::JobSpec spec;
  spec.set_name("a");
  spec.set_world_size(2);
  spec.mutable_mlp()->set_input_dim(4);
  spec.mutable_mlp()->add_hidden_dims(8);
  spec.mutable_mlp()->set_output_dim(2);
  spec.mutable_mlp()->set_batch_size(3);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.set_steps(100);
  spec.set_seed(7);
  return spec;
}

TEST(SpecFingerprintTest, IsStableHexAndIgnoresWhatAResumeMayChange) {
  ASSERT_OK_AND_ASSIGN(const std::string base, SpecFingerprint(MlpSpec()));
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base.find_first_not_of("0123456789abcdef"), std::string::npos);
  v1::JobSpec other = MlpSpec();
  other.set_name("b");
  other.set_world_size(3);
  other.set_min_world_size(1);
  other.set_max_restarts(4);
  other.set_steps(200);
  other.mutable_checkpoint()->set_dir("/c");
  other.set_from_checkpoint("/c/step-5");
  other.set_bucket_cap_mb(1);
  other.set_output_dir("/o");
  ASSERT_OK_AND_ASSIGN(const std::string same, SpecFingerprint(other));
  EXPECT_EQ(same, base);
}

TEST(SpecFingerprintTest, ChangesWithModelOptimizerOrSeed) {
  ASSERT_OK_AND_ASSIGN(const std::string base, SpecFingerprint(MlpSpec()));
  v1::JobSpec wider = MlpSpec();
  wider.mutable_mlp()->set_hidden_dims(0, 16);
  v1::JobSpec sgd = MlpSpec();
  sgd.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  v1::JobSpec seed = MlpSpec();
  seed.set_seed(8);
  for (const v1::JobSpec& spec : {wider, sgd, seed}) {
    ASSERT_OK_AND_ASSIGN(const std::string fp, SpecFingerprint(spec));
    EXPECT_NE(fp, base) << spec.ShortDebugString();
  }
}

}  // namespace
}  // namespace pshard::checkpoint
