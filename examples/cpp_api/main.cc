// cpp_api_example: trains a linear regression with pshard's C++ API on N
// ranks (threads over Gloo on loopback) and prints the loss.
//
//   bazel run //examples/cpp_api:cpp_api_example -- --world_size=2 --steps=200
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "examples/cpp_api/linear_regression.h"

ABSL_FLAG(int, world_size, 2, "number of ranks");
ABSL_FLAG(int, steps, 200, "training steps");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto result = pshard::examples::RunLinearRegression(
      absl::GetFlag(FLAGS_world_size), absl::GetFlag(FLAGS_steps),
      /*verbose=*/true);
  if (!result.ok()) {
    std::fprintf(stderr, "training failed: %s\n",
                 result.status().ToString().c_str());
    return 1;
  }
  std::printf("loss %.6f -> %.6f\n", result->initial_loss, result->final_loss);
  for (size_t r = 0; r < result->state_bytes.size(); ++r) {
    std::printf("rank %zu: %d bucket(s), %lld bytes of Adam state\n", r,
                result->owned_buckets[r],
                static_cast<long long>(result->state_bytes[r]));
  }
  return 0;
}
