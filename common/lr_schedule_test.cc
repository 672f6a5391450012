// ScheduledLearningRate against closed-form values and, step for step,
// against torch.optim.lr_scheduler itself (testdata/lr_schedule_torch.py on
// /usr/bin/python3, skipped with a reason where torch is missing).
#include "common/lr_schedule.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

using Kind = LrSchedule::Kind;

TEST(LrScheduleTest, ConstantIsTheBaseLr) {
  LrSchedule s;
  for (int64_t t : {0, 1, 7, 1000000}) {
    EXPECT_EQ(ScheduledLearningRate(0.25, s, t), 0.25);
  }
}

TEST(LrScheduleTest, WarmupThenConstant) {
  LrSchedule s;
  s.warmup_steps = 4;
  s.warmup_start_factor = 0.2;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, s, 0), 0.2);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, s, 1), 0.4);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, s, 3), 0.8);
  EXPECT_EQ(ScheduledLearningRate(1.0, s, 4), 1.0);
  EXPECT_EQ(ScheduledLearningRate(1.0, s, 50), 1.0);
}

TEST(LrScheduleTest, LinearReachesTheEndFactorAndStays) {
  LrSchedule s;
  s.kind = Kind::kLinear;
  s.start_factor = 1;
  s.end_factor = 0;
  s.total_iters = 10;
  EXPECT_EQ(ScheduledLearningRate(2.0, s, 0), 2.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(2.0, s, 5), 1.0);
  EXPECT_EQ(ScheduledLearningRate(2.0, s, 10), 0.0);
  EXPECT_EQ(ScheduledLearningRate(2.0, s, 11), 0.0);
}

TEST(LrScheduleTest, CosineAfterWarmupStartsAtTheBaseLr) {
  LrSchedule s;
  s.kind = Kind::kCosine;
  s.t_max = 8;
  s.eta_min = 0.1;
  s.warmup_steps = 2;
  EXPECT_EQ(ScheduledLearningRate(1.0, s, 2), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, s, 6), 0.55);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, s, 10), 0.1);
  // As torch's: it rises again after t_max.
  EXPECT_GT(ScheduledLearningRate(1.0, s, 11), 0.1);
}

TEST(LrScheduleTest, StepDecaysEveryStepSize) {
  LrSchedule s;
  s.kind = Kind::kStep;
  s.step_size = 3;
  s.gamma = 0.5;
  EXPECT_EQ(ScheduledLearningRate(1.0, s, 2), 1.0);
  EXPECT_EQ(ScheduledLearningRate(1.0, s, 3), 0.5);
  EXPECT_EQ(ScheduledLearningRate(1.0, s, 8), 0.25);
  EXPECT_EQ(ScheduledLearningRate(1.0, s, -1), 1.0);
}

std::string RunfilePath(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/",
                      workspace ? workspace : "pshard", "/", path);
}

struct TorchCase {
  std::string json;  // an LrSchedule, proto field names
  double base_lr;
  int steps;
};

std::vector<TorchCase> TorchCases() {
  return {
      {R"({"warmup_steps": 7})", 0.1, 30},
      {R"({"kind": "CONSTANT", "warmup_steps": 5, "warmup_start_factor": 0.01})", 3e-4, 30},
      {R"({"kind": "LINEAR"})", 0.1, 30},
      {R"({"kind": "LINEAR", "start_factor": 1.0, "end_factor": 0.0, "total_iters": 200})", 1e-3, 300},
      {R"({"kind": "LINEAR", "start_factor": 0.5, "end_factor": 0.1, "total_iters": 40, "warmup_steps": 10, "warmup_start_factor": 0.1})", 0.02, 80},
      {R"({"kind": "COSINE", "t_max": 100})", 0.1, 250},
      {R"({"kind": "COSINE", "t_max": 1000, "eta_min": 1e-5, "warmup_steps": 50})", 6e-4, 1200},
      {R"({"kind": "COSINE", "t_max": 3, "warmup_steps": 1, "warmup_start_factor": 0.5})", 1.0, 20},
      {R"({"kind": "STEP", "step_size": 7})", 0.1, 100},
      {R"({"kind": "STEP", "step_size": 30, "gamma": 0.5, "warmup_steps": 12})", 0.05, 400},
  };
}

// Every case's torch lrs from one run of testdata/lr_schedule_torch.py, or
// why there are none.
absl::StatusOr<std::vector<std::string>> TorchLearningRates(
    const std::vector<TorchCase>& cases) {
  const std::string dir = ::testing::TempDir();
  const std::string input = dir + "/lr_cases.tsv";
  const std::string output = dir + "/lr_torch.txt";
  {
    std::ofstream in(input);
    for (const TorchCase& c : cases) {
      in << c.json << "\t" << absl::StrCat(c.base_lr) << "\t" << c.steps
         << "\n";
    }
  }
  const std::string command = absl::StrCat(
      "/usr/bin/python3 ", RunfilePath("common/testdata/lr_schedule_torch.py"),
      " < ", input, " > ", output, " 2>&1");
  const int status = std::system(command.c_str());
  std::ifstream out(output);
  std::stringstream text;
  text << out.rdbuf();
  if (status != 0) return absl::UnavailableError(text.str());
  return std::vector<std::string>(absl::StrSplit(text.str(), '\n',
                                                 absl::SkipEmpty()));
}

bool HaveTorch() {
  return std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") == 0;
}

TEST(LrScheduleTorchTest, MatchesTorchStepForStep) {
  if (!HaveTorch()) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch (tools/setup.sh "
                    "installs python3-torch): no torch reference";
  }
  const std::vector<TorchCase> cases = TorchCases();
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> lines,
                       TorchLearningRates(cases));
  ASSERT_EQ(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const TorchCase& c = cases[i];
    SCOPED_TRACE(c.json);
    v1::LrSchedule proto;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(c.json, &proto).ok());
    const LrSchedule schedule = ResolveLrSchedule(proto);
    const std::vector<std::string> values =
        absl::StrSplit(lines[i], ' ', absl::SkipEmpty());
    ASSERT_EQ(static_cast<int>(values.size()), c.steps);
    double worst = 0;
    for (int t = 0; t < c.steps; ++t) {
      double want;
      ASSERT_TRUE(absl::SimpleAtod(values[t], &want)) << values[t];
      const double got = ScheduledLearningRate(c.base_lr, schedule, t);
      // Relative, but to a thousandth of the base lr where the lr nears 0.
      const double scale = std::max(std::abs(want), 1e-3 * c.base_lr);
      const double err = std::abs(got - want) / scale;
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-12) << "step " << t << ": got " << got << ", torch "
                            << want;
    }
    std::printf("%s: worst relative difference from torch %.3g\n",
                c.json.c_str(), worst);
  }
}

}  // namespace
}  // namespace pshard
