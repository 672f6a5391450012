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
#include "tests/worker/restart_testing.h"

namespace pshard::testing {
namespace {

constexpr int kSteps = 12;
constexpr double kLr = 0.01;

v1::JobSpec ClipSpec(Cluster& cluster, const std::string& data, int world,
                     double max_grad_norm, double norm_type,
                     const std::string& name) {
  // Small buckets: several, owned by every rank.
  v1::JobSpec spec =
      ReplayAdamSpec(cluster, data, world, name, kSteps, kLr, 0.002);
  spec.mutable_optimizer()->set_max_grad_norm(max_grad_norm);
  spec.mutable_optimizer()->set_norm_type(norm_type);
  return spec;
}

TEST(ClipE2eTest, ReplayJobsClipLikeTorch) {
  if (!RunPython({"-c", "import torch"}, ::testing::TempDir() + "/torch.log")
           .ok()) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch (tools/setup.sh "
                 << "installs python3-torch): no torch reference";
  }
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data = WriteReplayData(*cluster, kSteps, 3);
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
        const std::string log = absl::StrCat(cluster->dir(), "/", name, ".log");
        EXPECT_OK(RunPython(
            {RunfilePath("tests/worker/replay_torch_reference.py"),
             "--replay_tools", RunfilePath("examples/make_replay_data.py"),
             "--data", data, "--steps", absl::StrCat(kSteps), "--switch_step",
             absl::StrCat(kSteps), "--world_before", absl::StrCat(world),
             "--world_after", absl::StrCat(world), "--lr", absl::StrCat(kLr),
             "--max_grad_norm", absl::StrCat(limit), "--norm_type",
             std::isinf(norm_type) ? "inf" : "2", "--actual_grad_norm",
             absl::StrFormat("%.17g", job.progress().grad_norm()), "--rtol",
             "1e-6", "--atol", "1e-7", "--actual", job.output_path()},
            log));
        const std::string report = ReadFile(log);
        EXPECT_NE(report.find(clips ? absl::StrCat(kSteps, " of ", kSteps,
                                                   " steps clipped")
                                    : absl::StrCat("0 of ", kSteps,
                                                   " steps clipped")),
                  std::string::npos)
            << report;
        printf("%s: %s", name.c_str(), report.c_str());
      }
    }
  }
}

TEST(ClipE2eTest, ReplayJobsAccumulateLikeTorch) {
  if (!RunPython({"-c", "import torch"}, ::testing::TempDir() + "/torch.log")
           .ok()) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch (tools/setup.sh "
                 << "installs python3-torch): no torch reference";
  }
  constexpr int kMicro = 4, kOptimizerSteps = 5;
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));
  const std::string data =
      WriteReplayData(*cluster, kMicro * kOptimizerSteps, 3);
  for (int world = 1; world <= 3; ++world) {
    const std::string name = absl::StrCat("accumulate-", world);
    SCOPED_TRACE(name);
    v1::JobSpec spec = ReplayAdamSpec(*cluster, data, world, name,
                                      kOptimizerSteps, kLr, 0.002);
    spec.set_gradient_accumulation_steps(kMicro);
    const v1::Job job = RunToEnd(*cluster, spec, 3);
    ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << cluster->Logs();
    EXPECT_EQ(job.progress().step(), kOptimizerSteps);
    EXPECT_FALSE(job.progress().has_grad_norm());  // no clipping, no norm
    const std::string log = absl::StrCat(cluster->dir(), "/", name, ".log");
    EXPECT_OK(RunPython(
        {RunfilePath("tests/worker/replay_torch_reference.py"),
         "--replay_tools", RunfilePath("examples/make_replay_data.py"),
         "--data", data, "--steps", absl::StrCat(kOptimizerSteps),
         "--switch_step", absl::StrCat(kOptimizerSteps), "--world_before",
         absl::StrCat(world), "--world_after", absl::StrCat(world), "--lr",
         absl::StrCat(kLr), "--accumulation", absl::StrCat(kMicro), "--rtol",
         "1e-6", "--atol", "1e-7", "--actual", job.output_path()},
        log));
    printf("%s: %s", name.c_str(), ReadFile(log).c_str());
  }
}

}  // namespace
}  // namespace pshard::testing
