// cuda_util.h's helpers that only a GPU exercises: the primary-context query
// behind ScopedDevice's restore, and ScopedDevice itself. Skips without a
// GPU (and builds to nothing without CUDA).
#include "gtest/gtest.h"
#include "worker/gpu/gpu_test_util.h"

#if defined(PSHARD_HAS_CUDA)
#include <cuda_runtime_api.h>

#include "common/status_matchers.h"
#include "worker/gpu/cuda_util.h"
#endif

namespace pshard::worker::gpu {
namespace {

#if defined(PSHARD_HAS_CUDA)

TEST(PrimaryContextTest, KnownAndActiveOnceTheDeviceIsUsed) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  ASSERT_OK(CudaStatus(cudaSetDevice(0), "cudaSetDevice"));
  ASSERT_OK(CudaStatus(cudaFree(nullptr), "cudaFree(nullptr)"));
  // Without an answer ScopedDevice would fall back to creating contexts on
  // whatever device a thread started on.
  const std::optional<bool> active = PrimaryContextActive(0);
  ASSERT_TRUE(active.has_value())
      << "cuDevicePrimaryCtxGetState is not reachable through the runtime";
  EXPECT_TRUE(*active);
  int count = 0;
  ASSERT_OK(CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  EXPECT_FALSE(PrimaryContextActive(count).has_value());  // no such device
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST(ScopedDeviceTest, SetsAndRestoresAnActiveDevice) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  ASSERT_OK(CudaStatus(cudaSetDevice(0), "cudaSetDevice"));
  {
    ScopedDevice same(0);
    EXPECT_OK(same.status());
    int current = -1;
    ASSERT_OK(CudaStatus(cudaGetDevice(&current), "cudaGetDevice"));
    EXPECT_EQ(current, 0);
  }
  {
    ScopedDevice missing(1 << 20);
    EXPECT_FALSE(missing.status().ok());
  }
  int current = -1;
  ASSERT_OK(CudaStatus(cudaGetDevice(&current), "cudaGetDevice"));
  EXPECT_EQ(current, 0);
}

#else

TEST(CudaUtilTest, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace pshard::worker::gpu
