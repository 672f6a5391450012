// End to end, global gradient-norm clipping (OptimizerSpec.max_grad_norm,
// norm_type): `replay` jobs (recorded gradients) of 1, 2 and 3 pshard-worker
// processes under the real coordinator, with the L2 and the infinity norm,
// at a limit every step exceeds (clipped) and one no step reaches, end with
// the parameters torch.optim.Adam gets after torch.nn.utils.clip_grad_norm_
// on the same averaged gradients (within 1e-6 relative), and report its
// pre-clip norm as progress (grad_norm). Also gradient accumulation
// (JobSpec.gradient_accumulation_steps): 4 recorded micro-batches per step
// end as torch stepping on their mean, one batch 4 times larger; progress
// counts optimizer steps.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/worker/reference.h"
#include "google/protobuf/util/json_util.h"
#include "tests/worker/replay_testing.h"
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

constexpr int kSteps = 12;
constexpr double kLr = 0.01;

// A replay job of Adam at kLr with small buckets (several, owned by every
// rank).
v1::JobSpec AdamSpec(Cluster& cluster, const std::string& data, int world,
                     int64_t steps, const std::string& name) {
  v1::OptimizerSpec adam;
  adam.set_kind(v1::OptimizerSpec::ADAM);
  adam.mutable_hyper_parameters()->set_lr(kLr);
  v1::JobSpec spec = ReplaySpec(cluster, data, world, steps, adam, name);
  spec.set_bucket_cap_mb(0.002);
  return spec;
}

v1::JobSpec ClipSpec(Cluster& cluster, const std::string& data, int world,
                     double max_grad_norm, double norm_type,
                     const std::string& name) {
  v1::JobSpec spec = AdamSpec(cluster, data, world, kSteps, name);
  spec.mutable_optimizer()->set_max_grad_norm(max_grad_norm);
  spec.mutable_optimizer()->set_norm_type(norm_type);
  return spec;
}

// The job's optimizer as the torch reference reads it.
std::string OptimizerJson(const v1::JobSpec& spec) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec.optimizer(),
                                                          &json, options)
                  .ok());
  return json;
}

TEST(ClipE2eTest, ReplayJobsClipLikeTorch) {
  if (!PythonHasTorch()) {
    GTEST_SKIP() << kPython << " cannot import torch (tools/setup.sh "
                 << "installs python3-torch): no torch reference";
  }
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data = WriteReplayData(*cluster, "replay", kSteps, 3);
  for (const double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
    for (int world = 1; world <= 3; ++world) {
      // Every step's norm, from the reference with a limit nothing reaches.
      std::vector<double> norms;
      ASSERT_OK(ReferenceParameters(
                    ClipSpec(*cluster, data, world, 1e30, norm_type, "probe"),
                    &norms)
                    .status());
      ASSERT_EQ(norms.size(), static_cast<size_t>(kSteps));
      const double smallest = *std::min_element(norms.begin(), norms.end());
      const double largest = *std::max_element(norms.begin(), norms.end());
      for (const bool clips : {true, false}) {
        const double limit = clips ? smallest / 2 : largest * 2;
        const std::string name =
            absl::StrCat("clip-", std::isinf(norm_type) ? "inf" : "l2", "-",
                         world, clips ? "-clips" : "-never");
        SCOPED_TRACE(name);
        const v1::JobSpec spec =
            ClipSpec(*cluster, data, world, limit, norm_type, name);
        const v1::Job job = RunToEnd(*cluster, spec, 3);
        ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
        // The last step's pre-clip norm, as progress reported it.
        ASSERT_TRUE(job.progress().has_grad_norm());
        EXPECT_NEAR(job.progress().grad_norm(), norms.back(),
                    1e-6 * norms.back());
        std::string report;
        EXPECT_OK(CheckAgainstTorch(
            data, OptimizerJson(spec), kSteps, kSteps, world, world,
            job.output_path(), 1e-6, 1e-7,
            {"--actual_grad_norm",
             absl::StrFormat("%.17g", job.progress().grad_norm())},
            &report));
        EXPECT_NE(report.find(clips ? absl::StrCat(kSteps, " of ", kSteps,
                                                   " steps clipped")
                                    : absl::StrCat("0 of ", kSteps,
                                                   " steps clipped")),
                  std::string::npos)
            << report;
      }
    }
  }
}

TEST(ClipE2eTest, ReplayJobsAccumulateLikeTorch) {
  if (!PythonHasTorch()) {
    GTEST_SKIP() << kPython << " cannot import torch (tools/setup.sh "
                 << "installs python3-torch): no torch reference";
  }
  constexpr int kMicro = 4, kOptimizerSteps = 5;
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data =
      WriteReplayData(*cluster, "replay", kMicro * kOptimizerSteps, 3);
  for (int world = 1; world <= 3; ++world) {
    const std::string name = absl::StrCat("accumulate-", world);
    SCOPED_TRACE(name);
    v1::JobSpec spec = AdamSpec(*cluster, data, world, kOptimizerSteps, name);
    spec.set_gradient_accumulation_steps(kMicro);
    const v1::Job job = RunToEnd(*cluster, spec, 3);
    ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
    EXPECT_EQ(job.progress().step(), kOptimizerSteps);
    EXPECT_FALSE(job.progress().has_grad_norm());  // no clipping, no norm
    EXPECT_OK(CheckAgainstTorch(data, OptimizerJson(spec), kOptimizerSteps,
                                kOptimizerSteps, world, world,
                                job.output_path(), 1e-6, 1e-7,
                                {"--accumulation", absl::StrCat(kMicro)}));
  }
}

}  // namespace
}  // namespace pshard::testing
