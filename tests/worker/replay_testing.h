// What the replay end-to-end tests share: recorded gradients written by
// examples/make_replay_data.py, a replay job spec over them, and the torch
// reference (tests/worker/replay_torch_reference.py) run on a job's output.
// Python is Debian's /usr/bin/python3 (the one with python3-torch).
#ifndef PSHARD_TESTS_WORKER_REPLAY_TESTING_H_
#define PSHARD_TESTS_WORKER_REPLAY_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pshard/v1/job_spec.pb.h"
#include "tests/testing/cluster.h"

namespace pshard::testing {

inline constexpr char kPython[] = "/usr/bin/python3";

// Runs `args` with kPython to its end, its output going to `log`. Internal
// with the log when it fails or exits non-zero.
absl::Status RunPython(const std::vector<std::string>& args,
                       const std::string& log);

// Whether kPython can import torch (the reference needs it).
bool PythonHasTorch();

// Writes recorded gradients of `ranks` ranks for `steps` steps (seed 5)
// under <cluster dir>/<name> and returns that directory.
std::string WriteReplayData(Cluster& cluster, const std::string& name,
                            int64_t steps, int ranks);

// A replay job over `data` at `world`, with `optimizer`, writing its
// parameters under <cluster dir>/out-<name>.
v1::JobSpec ReplaySpec(Cluster& cluster, const std::string& data, int world,
                       int64_t steps, const v1::OptimizerSpec& optimizer,
                       const std::string& name);

// Checks a replay job's output (`actual`, a params.safetensors) against the
// torch optimizer `optimizer_json` stands for: gradients averaged over
// `world_before` ranks up to `switch_step`, over `world_after` after it;
// within rtol (and atol near zero). The reference's report goes to stdout
// and, when `report` is given, there. `extra_args` go to the reference
// (--accumulation N, --actual_grad_norm X; see replay_torch_reference.py).
absl::Status CheckAgainstTorch(const std::string& data,
                               const std::string& optimizer_json,
                               int64_t steps, int64_t switch_step,
                               int world_before, int world_after,
                               const std::string& actual, double rtol,
                               double atol,
                               const std::vector<std::string>& extra_args = {},
                               std::string* report = nullptr);

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_WORKER_REPLAY_TESTING_H_
