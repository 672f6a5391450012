#include "tests/worker/replay_testing.h"

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {

absl::Status RunPython(const std::vector<std::string>& args,
                       const std::string& log) {
  std::vector<std::string> argv = {kPython};
  argv.insert(argv.end(), args.begin(), args.end());
  ASSIGN_OR_RETURN(auto process, Subprocess::Start(argv, {}, log));
  ASSIGN_OR_RETURN(int status, process->Wait(absl::Seconds(120)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(args[0], " failed (wait status ",
                                            status, "):\n", ReadFile(log)));
  }
  return absl::OkStatus();
}

bool PythonHasTorch() {
  return RunPython({"-c", "import torch"}, ::testing::TempDir() + "/torch.log")
      .ok();
}

std::string WriteReplayData(Cluster& cluster, const std::string& name,
                            int64_t steps, int ranks) {
  const std::string data = absl::StrCat(cluster.dir(), "/", name);
  EXPECT_OK(RunPython({RunfilePath("examples/make_replay_data.py"), "--out",
                       data, "--steps", absl::StrCat(steps), "--ranks",
                       absl::StrCat(ranks), "--seed", "5"},
                      absl::StrCat(cluster.dir(), "/", name, ".log")));
  return data;
}

v1::JobSpec ReplaySpec(Cluster& cluster, const std::string& data, int world,
                       int64_t steps, const v1::OptimizerSpec& optimizer,
                       const std::string& name) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(world);
  spec.mutable_replay()->set_params_path(data + "/params.safetensors");
  spec.mutable_replay()->set_gradients_dir(data + "/gradients");
  spec.set_bucket_cap_mb(0.05);
  spec.set_steps(steps);
  spec.set_progress_every(1);
  spec.set_collective_timeout_seconds(20);
  *spec.mutable_optimizer() = optimizer;
  spec.set_output_dir(absl::StrCat(cluster.dir(), "/out-", name));
  return spec;
}

absl::Status CheckAgainstTorch(const std::string& data,
                               const std::string& optimizer_json,
                               int64_t steps, int64_t switch_step,
                               int world_before, int world_after,
                               const std::string& actual, double rtol,
                               double atol,
                               const std::vector<std::string>& extra_args,
                               std::string* report) {
  const std::string log = absl::StrCat(actual, ".reference.log");
  std::vector<std::string> args = {
      RunfilePath("tests/worker/replay_torch_reference.py"), "--replay_tools",
      RunfilePath("examples/make_replay_data.py"), "--torch_optim",
      RunfilePath("worker/optim/testdata/torch_optim.py"), "--optimizer",
      optimizer_json, "--data", data, "--steps", absl::StrCat(steps),
      "--switch_step", absl::StrCat(switch_step), "--world_before",
      absl::StrCat(world_before), "--world_after", absl::StrCat(world_after),
      "--rtol", absl::StrFormat("%g", rtol), "--atol",
      absl::StrFormat("%g", atol), "--actual", actual};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const absl::Status status = RunPython(args, log);
  const std::string text = ReadFile(log);
  std::printf("%s", text.c_str());
  if (report != nullptr) *report = text;
  return status;
}

}  // namespace pshard::testing
