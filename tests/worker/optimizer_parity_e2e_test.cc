// End to end against torch 1.13: replay jobs (recorded gradients of 3 ranks,
// examples/make_replay_data.py) of 1, 2 and 3 pshard-worker processes under
// the real coordinator, with Adagrad, RMSprop, Lion and Adam/AdamW's
// amsgrad, end with the parameters the torch optimizer their OptimizerSpec
// stands for gets on the rank-averaged gradients
// (tests/worker/replay_torch_reference.py; Lion as lion-pytorch in torch
// operations, worker/optim/testdata/torch_optim.py): within 1e-6 relative.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/worker/replay_testing.h"

namespace pshard::testing {
namespace {

constexpr int kSteps = 20;
constexpr int kMaxWorld = 3;

struct ParityCase {
  const char* name;
  // The OptimizerSpec, in the JSON both the job and the reference read.
  const char* json;
};

// Each kind with its options, in two groups ("*.bias" differs).
const ParityCase kCases[] = {
    {"adam_amsgrad",
     R"({"kind": "ADAM", "hyper_parameters": {"lr": 0.01, "amsgrad": true,
         "weight_decay": 0.01},
         "param_groups": [{"params": ["*.bias"],
                           "hyper_parameters": {"amsgrad": false}}]})"},
    {"adamw_amsgrad",
     R"({"kind": "ADAMW", "hyper_parameters": {"lr": 0.01, "amsgrad": true,
         "betas": [0.8, 0.95]}})"},
    {"adagrad",
     R"({"kind": "ADAGRAD", "hyper_parameters": {"lr": 0.05, "lr_decay": 0.01,
         "weight_decay": 0.001, "initial_accumulator_value": 0.1},
         "param_groups": [{"params": ["*.bias"],
                           "hyper_parameters": {"eps": 1e-6,
                                                "initial_accumulator_value": 0}}]})"},
    {"rmsprop",
     R"({"kind": "RMSPROP", "hyper_parameters": {"lr": 0.001, "alpha": 0.9,
         "centered": true, "momentum": 0.9, "weight_decay": 0.001},
         "param_groups": [{"params": ["*.bias"],
                           "hyper_parameters": {"centered": false,
                                                "momentum": 0}}]})"},
    {"lion",
     R"({"kind": "LION", "hyper_parameters": {"lr": 0.001, "weight_decay": 0.1,
         "lr_schedule": {"kind": "COSINE", "t_max": 20}},
         "param_groups": [{"params": ["*.bias"],
                           "hyper_parameters": {"weight_decay": 0,
                                                "betas": [0.95, 0.98]}}]})"},
};

class OptimizerParityE2eTest : public ::testing::TestWithParam<ParityCase> {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.workers = kMaxWorld;
    auto cluster = Cluster::Start(options);
    ASSERT_OK(cluster.status());
    cluster_ = cluster->release();
    data_ = WriteReplayData(*cluster_, "replay", kSteps, kMaxWorld);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static Cluster* cluster_;
  static std::string data_;
};

Cluster* OptimizerParityE2eTest::cluster_ = nullptr;
std::string OptimizerParityE2eTest::data_;

TEST_P(OptimizerParityE2eTest, OneTwoAndThreeRanksMatchTorch) {
  if (!PythonHasTorch()) {
    GTEST_SKIP() << kPython << " cannot import torch (tools/setup.sh "
                 << "installs python3-torch): no torch reference";
  }
  ASSERT_NE(cluster_, nullptr);
  const ParityCase& c = GetParam();
  ASSERT_OK_AND_ASSIGN(v1::OptimizerSpec optimizer,
                       ParseOptimizerSpecJson(c.json));
  for (int world = 1; world <= kMaxWorld; ++world) {
    SCOPED_TRACE(absl::StrCat(c.name, " on ", world, " ranks"));
    const v1::JobSpec spec =
        ReplaySpec(*cluster_, data_, world, kSteps, optimizer,
                   absl::StrCat(c.name, "-", world));
    ASSERT_OK_AND_ASSIGN(v1::Job submitted, cluster_->Submit(spec));
    ASSERT_OK_AND_ASSIGN(
        v1::Job job, cluster_->WaitForEnd(submitted.id(), absl::Seconds(60)));
    ASSERT_EQ(job.state(), v1::SUCCEEDED)
        << job.reason() << "\n" << cluster_->Logs();
    EXPECT_OK(CheckAgainstTorch(data_, c.json, kSteps, kSteps, world, world,
                                job.output_path(), /*rtol=*/1e-6,
                                /*atol=*/1e-7));
    // The pool is whole again before the next job.
    ASSERT_TRUE(
        cluster_->WaitForIdle(cluster_->num_workers(), absl::Seconds(10)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    NewKinds, OptimizerParityE2eTest, ::testing::ValuesIn(kCases),
    [](const ::testing::TestParamInfo<ParityCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace pshard::testing
