// Test helpers: deterministic parameters with Adam state, and whole
// checkpoints written the way owners and the coordinator would write them.
#ifndef PSHARD_CHECKPOINT_TEST_CHECKPOINTS_H_
#define PSHARD_CHECKPOINT_TEST_CHECKPOINTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"

namespace pshard::checkpoint::testing {

// One parameter's values and its Adam state, owned.
struct OwnedParameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> value, exp_avg, exp_avg_sq;
  ParameterTensors View() const;
};

// `count` parameters "p<i>.weight" of 1 + 7*i elements (shape [1+7i] or a 2-D
// shape for every third), with values that depend on (i, element, step).
std::vector<OwnedParameter> MakeParameters(int count, int64_t step);

// Writes step `step` under `root` at `world_size` ranks, parameter i owned by
// rank owner_of[i] (default i % world_size), then the manifest.
absl::StatusOr<Manifest> WriteCheckpoint(const std::string& root, int64_t step,
                                         int world_size,
                                         const std::vector<OwnedParameter>& params,
                                         std::vector<int> owner_of = {},
                                         const std::string& fingerprint = "fp-1");

// Overwrites one byte of `path` at `offset` (from the end when negative).
void FlipByte(const std::string& path, int64_t offset);
// Cuts `path` to `size` bytes.
void Truncate(const std::string& path, int64_t size);

}  // namespace pshard::checkpoint::testing

#endif  // PSHARD_CHECKPOINT_TEST_CHECKPOINTS_H_
