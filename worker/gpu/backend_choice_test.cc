#include "worker/gpu/backend_choice.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

TEST(ResolveWorkerDeviceTest, Values) {
  ASSERT_OK_AND_ASSIGN(WorkerDevice cpu, ResolveWorkerDevice("cpu", 8, ""));
  EXPECT_FALSE(cpu.is_gpu());
  EXPECT_EQ(cpu.name, "cpu");
  ASSERT_OK_AND_ASSIGN(WorkerDevice autod, ResolveWorkerDevice("auto", 2, ""));
  EXPECT_EQ(autod.cuda_device, 0);
  EXPECT_EQ(autod.name, "cuda:0");
  ASSERT_OK_AND_ASSIGN(WorkerDevice none,
                       ResolveWorkerDevice("auto", 0, "no driver"));
  EXPECT_FALSE(none.is_gpu());
  ASSERT_OK_AND_ASSIGN(WorkerDevice three,
                       ResolveWorkerDevice("cuda:3", 4, ""));
  EXPECT_EQ(three.cuda_device, 3);
  EXPECT_EQ(three.name, "cuda:3");
}

TEST(ResolveWorkerDeviceTest, Errors) {
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA:0", ""}) {
    EXPECT_THAT(ResolveWorkerDevice(bad, 4, ""),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("cpu, auto or cuda:N")))
        << bad;
  }
  EXPECT_THAT(ResolveWorkerDevice("cuda:4", 4, ""),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("only 4")));
  EXPECT_THAT(ResolveWorkerDevice("cuda:0", 0, "insufficient driver"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("insufficient driver")));
}

constexpr CommBackend kNone = static_cast<CommBackend>(-1);

TEST(ChooseBackendTest, AutoFollowsTheDevice) {
  WorkerDevice cpu;
  WorkerDevice gpu;
  gpu.cuda_device = 0;
  gpu.name = "cuda:0";
  EXPECT_EQ(ChooseBackend(v1::JobSpec::AUTO, cpu).value_or(kNone),
            CommBackend::kGloo);
  EXPECT_EQ(
      ChooseBackend(v1::JobSpec::BACKEND_UNSPECIFIED, gpu).value_or(kNone),
      CommBackend::kNccl);
  EXPECT_EQ(ChooseBackend(v1::JobSpec::AUTO, gpu).value_or(kNone),
            CommBackend::kNccl);
  EXPECT_EQ(ChooseBackend(v1::JobSpec::GLOO, gpu).value_or(kNone),
            CommBackend::kGloo);
  EXPECT_EQ(ChooseBackend(v1::JobSpec::NCCL, gpu).value_or(kNone),
            CommBackend::kNccl);
  EXPECT_THAT(
      ChooseBackend(v1::JobSpec::NCCL, cpu),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("NCCL")));
}

}  // namespace
}  // namespace pshard::worker
