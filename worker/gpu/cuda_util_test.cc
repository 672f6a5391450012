// cuda_util.h's helpers that only a GPU exercises: the primary-context query
// behind ScopedDevice's restore, ScopedDevice itself, and SynchronizeStream's
// deadline. Skips without a
// GPU (and builds to nothing without CUDA).
#include "gtest/gtest.h"
#include "worker/gpu/gpu_test_util.h"

#if defined(PSHARD_HAS_CUDA)
#include <cuda_runtime_api.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/fake_clock.h"
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

// A host function that holds its stream until released.
void CUDART_CB HoldUntilReleased(void* flag) {
  while (!static_cast<std::atomic<bool>*>(flag)->load()) {
    std::this_thread::yield();
  }
}

TEST(SynchronizeStreamTest, TimesOutOnHeldWorkThenSucceedsOnceItFinishes) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  ASSERT_OK(CudaStatus(cudaSetDevice(0), "cudaSetDevice"));
  ASSERT_OK_AND_ASSIGN(CudaStream stream, CudaStream::Create("test stream"));
  EXPECT_OK(SynchronizeStream(stream.get(), absl::Seconds(10), "empty",
                              Clock::Real()));

  std::atomic<bool> released{false};
  ASSERT_OK(CudaStatus(
      cudaLaunchHostFunc(stream.get(), HoldUntilReleased, &released),
      "cudaLaunchHostFunc"));
  EXPECT_THAT(SynchronizeStream(stream.get(), absl::Milliseconds(50), "held",
                                Clock::Real()),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       ::testing::HasSubstr("held: device work did not finish")));
  released = true;
  EXPECT_OK(SynchronizeStream(stream.get(), absl::Seconds(10), "released",
                              Clock::Real()));
  // Polling left nothing in the last-error slot for the next launch.
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

// The deadline is measured on the injected clock: a 10 s timeout on a
// FakeClock that jumps to the end of every backoff pause (at most 1 ms) ends
// after some 10,000 polls, in far less real time.
TEST(SynchronizeStreamTest, DeadlineRunsOnTheInjectedClock) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  ASSERT_OK(CudaStatus(cudaSetDevice(0), "cudaSetDevice"));
  ASSERT_OK_AND_ASSIGN(CudaStream stream, CudaStream::Create("test stream"));
  std::atomic<bool> released{false};
  ASSERT_OK(CudaStatus(
      cudaLaunchHostFunc(stream.get(), HoldUntilReleased, &released),
      "cudaLaunchHostFunc"));
  FakeClock clock;
  clock.set_advance_on_sleep(true);
  const absl::Time fake_start = clock.Now();
  const absl::Time real_start = absl::Now();
  EXPECT_THAT(SynchronizeStream(stream.get(), absl::Seconds(10), "held", clock),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       ::testing::HasSubstr("held: device work did not finish")));
  EXPECT_GE(clock.Now() - fake_start, absl::Seconds(10));
  EXPECT_LT(absl::Now() - real_start, absl::Seconds(5));
  released = true;
  EXPECT_OK(SynchronizeStream(stream.get(), absl::Seconds(10), "released",
                              Clock::Real()));
}

#else

TEST(CudaUtilTest, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace pshard::worker::gpu
