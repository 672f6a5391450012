// Test helper: GPU tests skip (with the reason) where no CUDA device is
// present. tools/gpu_check.sh sets PSHARD_REQUIRE_GPU=1, which turns "no
// device at all" into a failure, so a GPU machine never passes by skipping.
#ifndef PSHARD_WORKER_GPU_GPU_TEST_UTIL_H_
#define PSHARD_WORKER_GPU_GPU_TEST_UTIL_H_

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "worker/gpu/device.h"

namespace pshard::worker::testing {

inline bool GpuRequired() {
  const char* value = std::getenv("PSHARD_REQUIRE_GPU");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace pshard::worker::testing

// Skips the current test unless at least `n` CUDA devices are present. With
// PSHARD_REQUIRE_GPU=1 and no device at all, fails instead (a machine with
// fewer than `n` but some devices still skips multi-GPU tests).
#define PSHARD_SKIP_WITHOUT_GPUS(n)                                            \
  do {                                                                         \
    std::string pshard_why_;                                                   \
    const int pshard_count_ = ::pshard::worker::CudaDeviceCount(&pshard_why_); \
    if (pshard_count_ == 0) {                                                  \
      if (::pshard::worker::testing::GpuRequired()) {                          \
        FAIL() << "PSHARD_REQUIRE_GPU=1 but no CUDA device: " << pshard_why_;  \
      }                                                                        \
      GTEST_SKIP() << "no CUDA device: " << pshard_why_;                       \
    }                                                                          \
    if (pshard_count_ < (n)) {                                                 \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, found "               \
                   << pshard_count_;                                           \
    }                                                                          \
  } while (false)

#endif  // PSHARD_WORKER_GPU_GPU_TEST_UTIL_H_
