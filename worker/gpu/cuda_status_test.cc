#include "worker/gpu/cuda_status.h"

#include <string>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/gpu/device.h"

#if defined(PSHARD_HAS_CUDA)
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace pshard::worker::gpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

TEST(CudaErrorToStatusTest, SuccessIsOk) {
  EXPECT_OK(CudaErrorToStatus(0, "cudaSuccess", "no error", "anything"));
}

TEST(CudaErrorToStatusTest, MapsCodesAndKeepsText) {
  EXPECT_THAT(
      CudaErrorToStatus(2, "cudaErrorMemoryAllocation", "out of memory",
                        "bucket 3: cudaMalloc"),
      StatusIs(absl::StatusCode::kResourceExhausted,
               "bucket 3: cudaMalloc: cudaErrorMemoryAllocation (2): out of "
               "memory"));
  EXPECT_THAT(CudaErrorToStatus(35, "cudaErrorInsufficientDriver",
                                "CUDA driver version is insufficient", "ctx"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("cudaErrorInsufficientDriver (35)")));
  EXPECT_THAT(CudaErrorToStatus(100, "cudaErrorNoDevice", "no device", "ctx"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no device")));
  EXPECT_THAT(CudaErrorToStatus(1, "cudaErrorInvalidValue", "invalid", "ctx"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ctx")));
  EXPECT_THAT(CudaErrorToStatus(700, "cudaErrorIllegalAddress",
                                "an illegal memory access", "step"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("cudaErrorIllegalAddress (700)")));
}

TEST(CudaErrorToStatusTest, EmptyTextStillNamesTheError) {
  EXPECT_THAT(CudaErrorToStatus(999, "", "", "ctx"),
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("ctx"), HasSubstr("999"),
                             HasSubstr("unknown CUDA error"))));
}

TEST(NcclResultToStatusTest, SuccessAndInProgressAreOk) {
  EXPECT_OK(NcclResultToStatus(0, "no error", "", "ctx"));
  EXPECT_OK(NcclResultToStatus(7, "operation in progress", "", "ctx"));
}

TEST(NcclResultToStatusTest, MapsCodes) {
  EXPECT_THAT(NcclResultToStatus(4, "invalid argument", "count is negative",
                                 "ncclAllReduce"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "ncclAllReduce: NCCL invalid argument (4): count is "
                       "negative"));
  EXPECT_THAT(NcclResultToStatus(5, "invalid usage", "", "x"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "x: NCCL invalid usage (5)"));
  EXPECT_THAT(NcclResultToStatus(6, "remote process exited", "peer 3", "x"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer 3")));
  EXPECT_THAT(NcclResultToStatus(2, "unhandled system error", "", "x"),
              StatusIs(absl::StatusCode::kUnavailable, Not(IsEmpty())));
  EXPECT_THAT(NcclResultToStatus(1, "unhandled cuda error", "", "x"),
              StatusIs(absl::StatusCode::kInternal, Not(IsEmpty())));
  EXPECT_THAT(NcclResultToStatus(3, "internal error", "", "x"),
              StatusIs(absl::StatusCode::kInternal, Not(IsEmpty())));
}

TEST(DeviceTest, CountIsZeroWithAReasonOrPositive) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) {
    EXPECT_THAT(why, Not(IsEmpty()));
#if !defined(PSHARD_HAS_CUDA)
    EXPECT_EQ(why, std::string(kBuiltWithoutCuda));
#endif
  } else {
    EXPECT_GT(count, 0);
    EXPECT_OK(CudaDeviceDescription(0).status());
    EXPECT_THAT(CudaDeviceDescription(count).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("does not exist")));
  }
  EXPECT_EQ(CudaDeviceCount(), count);  // why_none is optional
}

#if defined(PSHARD_HAS_CUDA)
// cuda_status.cc repeats some enum values so that it needs no CUDA headers;
// check them against the real ones, and the real library texts.
TEST(CudaConstantsTest, MatchTheHeaders) {
  EXPECT_EQ(static_cast<int>(cudaErrorInvalidValue), 1);
  EXPECT_EQ(static_cast<int>(cudaErrorMemoryAllocation), 2);
  EXPECT_EQ(static_cast<int>(cudaErrorInsufficientDriver), 35);
  EXPECT_EQ(static_cast<int>(cudaErrorDevicesUnavailable), 46);
  EXPECT_EQ(static_cast<int>(cudaErrorNoDevice), 100);
  EXPECT_EQ(static_cast<int>(cudaErrorInvalidDevice), 101);
  EXPECT_EQ(static_cast<int>(cudaErrorNotReady), 600);
  EXPECT_EQ(static_cast<int>(ncclUnhandledCudaError), 1);
  EXPECT_EQ(static_cast<int>(ncclSystemError), 2);
  EXPECT_EQ(static_cast<int>(ncclInternalError), 3);
  EXPECT_EQ(static_cast<int>(ncclInvalidArgument), 4);
  EXPECT_EQ(static_cast<int>(ncclInvalidUsage), 5);
  EXPECT_EQ(static_cast<int>(ncclRemoteError), 6);
  EXPECT_EQ(static_cast<int>(ncclInProgress), 7);
}

TEST(CudaConstantsTest, RealLibraryTextsConvert) {
  const cudaError_t err = cudaErrorMemoryAllocation;
  EXPECT_THAT(CudaErrorToStatus(err, cudaGetErrorName(err),
                                cudaGetErrorString(err), "alloc"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cudaErrorMemoryAllocation")));
  EXPECT_THAT(
      NcclResultToStatus(ncclInvalidArgument,
                         ncclGetErrorString(ncclInvalidArgument), "", "nccl"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nccl: NCCL ")));
}
#endif

}  // namespace
}  // namespace pshard::worker::gpu
