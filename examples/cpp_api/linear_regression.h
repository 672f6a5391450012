// Example: data-parallel training of a linear regression model with pshard's
// C++ API (worker/api/trainer.h). Each rank runs its own training loop, with
// its own data shard, its own forward and backward; pshard averages the
// gradients, shards the Adam state across ranks and keeps the parameters in
// sync. Ranks are threads here, joined over Gloo on loopback with an
// in-memory rendezvous store; separate processes would share the
// coordinator's store instead.
#ifndef PSHARD_EXAMPLES_CPP_API_LINEAR_REGRESSION_H_
#define PSHARD_EXAMPLES_CPP_API_LINEAR_REGRESSION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace pshard::examples {

struct ExampleResult {
  double initial_loss = 0;
  double final_loss = 0;
  // Per rank: optimizer-state bytes held, and buckets owned.
  std::vector<int64_t> state_bytes;
  std::vector<int> owned_buckets;
};

// Trains y = W x + b (in_dim -> out_dim) for `steps` steps on `world_size`
// ranks; losses are rank 0's mean squared error.
absl::StatusOr<ExampleResult> RunLinearRegression(int world_size, int steps,
                                                  bool verbose);

}  // namespace pshard::examples

#endif  // PSHARD_EXAMPLES_CPP_API_LINEAR_REGRESSION_H_
