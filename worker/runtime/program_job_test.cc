// ProgramJob's environment: the torchrun names from the directive's
// placement (LOCAL_RANK, LOCAL_WORLD_SIZE) and the rank's device (the
// worker's, as the job's backend uses it).
#include "worker/runtime/program_job.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

v1::RunJobDirective Directive(int rank, int world, int local_rank,
                              int local_world) {
  v1::RunJobDirective d;
  d.set_job_id("job-1");
  d.set_epoch(1);
  d.set_rank(rank);
  d.set_world_size(world);
  d.set_local_rank(local_rank);
  d.set_local_world_size(local_world);
  d.mutable_spec()->mutable_program()->add_argv("/bin/true");
  return d;
}

// `cuda_device` -1: a CPU worker.
ProgramJobOptions OptionsOn(int cuda_device) {
  ProgramJobOptions options;
  options.worker_id = "w-3";
  if (cuda_device >= 0) {
    options.device.cuda_device = cuda_device;
    options.device.name = absl::StrCat("cuda:", cuda_device);
  }
  options.log_dir = "/tmp/logs";
  return options;
}

std::map<std::string, std::string> EnvOf(const v1::RunJobDirective& d,
                                         int cuda_device = -1) {
  absl::StatusOr<std::vector<std::string>> env =
      ProgramJob::Environment(d.spec(), d, OptionsOn(cuda_device), "h1:1234");
  EXPECT_OK(env.status());
  std::map<std::string, std::string> out;
  if (!env.ok()) return out;
  for (const std::string& entry : *env) {
    const size_t eq = entry.find('=');
    out[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return out;
}

TEST(ProgramJobEnvironmentTest, LocalRankComesFromThePlacement) {
  // Rank 5 of 8, the second of the job's three ranks on its host.
  std::map<std::string, std::string> env = EnvOf(Directive(5, 8, 1, 3));
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
  EXPECT_EQ(env["MASTER_ADDR"], "h1");
  EXPECT_EQ(env["MASTER_PORT"], "1234");
}

// PSHARD_DEVICE is where the job's backend puts the rank: the worker's GPU
// for NCCL (asked for, or AUTO on a GPU worker), the CPU for Gloo.
TEST(ProgramJobEnvironmentTest, DeviceFollowsTheJobsBackend) {
  v1::RunJobDirective d = Directive(0, 2, 0, 1);
  for (v1::JobSpec::Backend backend :
       {v1::JobSpec::BACKEND_UNSPECIFIED, v1::JobSpec::AUTO,
        v1::JobSpec::GLOO}) {
    d.mutable_spec()->set_backend(backend);
    EXPECT_EQ(EnvOf(d)["PSHARD_DEVICE"], "cpu") << backend;
  }
  d.mutable_spec()->set_backend(v1::JobSpec::AUTO);
  EXPECT_EQ(EnvOf(d, 1)["PSHARD_DEVICE"], "cuda:1");
  d.mutable_spec()->set_backend(v1::JobSpec::NCCL);
  EXPECT_EQ(EnvOf(d, 1)["PSHARD_DEVICE"], "cuda:1");
  d.mutable_spec()->set_backend(v1::JobSpec::GLOO);
  EXPECT_EQ(EnvOf(d, 1)["PSHARD_DEVICE"], "cpu");
}

TEST(ProgramJobEnvironmentTest, NcclOnAWorkerWithoutAGpuIsRefused) {
  v1::RunJobDirective d = Directive(0, 2, 0, 1);
  d.mutable_spec()->set_backend(v1::JobSpec::NCCL);
  EXPECT_THAT(ProgramJob::Environment(d.spec(), d, OptionsOn(-1), "h1:1234"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("NCCL")));
}

// The spec's overlap_param_broadcast is the session's default (pshard.h).
TEST(ProgramJobEnvironmentTest, OverlapParamBroadcastIsPassedWhenSet) {
  v1::RunJobDirective d = Directive(0, 2, 0, 1);
  EXPECT_EQ(EnvOf(d).count("PSHARD_OVERLAP_PARAM_BROADCAST"), 0);
  d.mutable_spec()->set_overlap_param_broadcast(true);
  EXPECT_EQ(EnvOf(d)["PSHARD_OVERLAP_PARAM_BROADCAST"], "1");
}

// The spec's precision is the session's default (pshardSetPrecision).
TEST(ProgramJobEnvironmentTest, PrecisionIsPassedWhenSet) {
  v1::RunJobDirective d = Directive(0, 2, 0, 1);
  EXPECT_EQ(EnvOf(d).count("PSHARD_PARAM_DTYPE"), 0);
  EXPECT_EQ(EnvOf(d).count("PSHARD_REDUCE_DTYPE"), 0);
  d.mutable_spec()->mutable_precision()->set_param_dtype(
      v1::PrecisionSpec::BF16);
  EXPECT_EQ(EnvOf(d)["PSHARD_PARAM_DTYPE"], "BF16");
  EXPECT_EQ(EnvOf(d)["PSHARD_REDUCE_DTYPE"], "FP32");
}

TEST(ProgramJobEnvironmentTest, OlderOrInconsistentDirectivesMeanOneRankPerHost) {
  // A coordinator from before the fields sends neither.
  for (const v1::RunJobDirective& d :
       {Directive(3, 4, 0, 0), Directive(3, 4, 2, 2), Directive(3, 4, -1, 2),
        Directive(1, 2, 0, 3)}) {
    std::map<std::string, std::string> env = EnvOf(d);
    EXPECT_EQ(env["LOCAL_RANK"], "0") << d.ShortDebugString();
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "1") << d.ShortDebugString();
  }
  const LocalPlacement ok = LocalPlacementOf(Directive(3, 4, 1, 2));
  EXPECT_EQ(ok.local_rank, 1);
  EXPECT_EQ(ok.local_world_size, 2);
}

}  // namespace
}  // namespace pshard::worker
