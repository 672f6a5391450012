// The GPU workloads against the CPU ones, one ComputeGradients at a time:
// synthetic bit for bit (also accumulated over micro-batches on the
// device), the host adapter bit for bit, the cuBLAS mlp to rounding (loss
// and every gradient). Skips without a GPU.
#include "worker/gpu/gpu_workloads.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/gpu/gpu_test_util.h"
#include "worker/workload/workload.h"

#if defined(PSHARD_HAS_CUDA)
#include <cuda_runtime_api.h>

#include "worker/gpu/cuda_util.h"
#endif

namespace pshard::worker {
namespace {

v1::JobSpec Job(const std::string& json) {
  v1::JobSpec spec;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &spec);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << json;
  return spec;
}

TEST(GpuWorkloadsTest, CreationWithoutAGpuBuildIsUnavailable) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
#if defined(PSHARD_HAS_CUDA)
  GTEST_SKIP() << "CUDA is built in: creation does not need a device";
#else
  EXPECT_THAT(CreateGpuWorkload(Job(R"({"synthetic": {"numParameters": 4}})"),
                                0, 1, 0, nullptr),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
#endif
}

#if defined(PSHARD_HAS_CUDA)

using gpu::CudaStatus;
using gpu::DeviceBuffer;

// Runs one ComputeGradients of `workload` on device buffers and returns the
// gradients (host), the loss and the sink's order.
struct Result {
  std::vector<std::vector<float>> grads;
  double loss = 0;
  std::vector<int> order;
};

struct OrderSink : GradientSink {
  void GradientReady(int i) override { order.push_back(i); }
  std::vector<int> order;
};

absl::StatusOr<Result> RunDevice(Workload& workload, int64_t step) {
  const auto& infos = workload.parameters();
  std::vector<DeviceBuffer> params, grads;
  std::vector<float*> p, g;
  for (const ParameterInfo& info : infos) {
    ASSIGN_OR_RETURN(DeviceBuffer a,
                     DeviceBuffer::Allocate(info.numel * 4, "p"));
    ASSIGN_OR_RETURN(DeviceBuffer b,
                     DeviceBuffer::Allocate(info.numel * 4, "g"));
    p.push_back(a.as<float>());
    g.push_back(b.as<float>());
    params.push_back(std::move(a));
    grads.push_back(std::move(b));
  }
  RETURN_IF_ERROR(workload.InitializeParameters(p));
  OrderSink sink;
  std::vector<const float*> cp(p.begin(), p.end());
  ASSIGN_OR_RETURN(double loss, workload.ComputeGradients(step, cp, g, sink));
  RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "sync"));
  Result r;
  r.loss = loss;
  r.order = sink.order;
  for (size_t i = 0; i < infos.size(); ++i) {
    r.grads.emplace_back(infos[i].numel);
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy(r.grads.back().data(), g[i], infos[i].numel * 4,
                              cudaMemcpyDeviceToHost),
                   "download"));
  }
  return r;
}

absl::StatusOr<Result> RunHost(Workload& workload, int64_t step) {
  const auto& infos = workload.parameters();
  std::vector<std::vector<float>> params(infos.size());
  Result r;
  std::vector<float*> p, g;
  r.grads.resize(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    params[i].resize(infos[i].numel);
    r.grads[i].resize(infos[i].numel);
    p.push_back(params[i].data());
    g.push_back(r.grads[i].data());
  }
  RETURN_IF_ERROR(workload.InitializeParameters(p));
  OrderSink sink;
  std::vector<const float*> cp(p.begin(), p.end());
  ASSIGN_OR_RETURN(r.loss, workload.ComputeGradients(step, cp, g, sink));
  r.order = sink.order;
  return r;
}

class GpuWorkloadsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { PSHARD_SKIP_WITHOUT_GPUS(1); }
};

TEST_F(GpuWorkloadsGpuTest, SyntheticIsBitIdentical) {
  const v1::JobSpec spec =
      Job(R"({"seed": 3, "synthetic": {"numParameters": 100003,
                                       "tensorNumel": 30000}})");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> cpu,
                       CreateWorkload(spec, 1, 2));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> gpu,
                       CreateGpuWorkload(spec, 1, 2, 0, nullptr));
  ASSERT_OK_AND_ASSIGN(Result c, RunHost(*cpu, 5));
  ASSERT_OK_AND_ASSIGN(Result g, RunDevice(*gpu, 5));
  EXPECT_EQ(g.order, c.order);
  EXPECT_EQ(g.grads, c.grads);
  EXPECT_TRUE(std::isnan(g.loss));
}

// gradient_accumulation_steps on the device (AccumulatingWorkload with the
// device arithmetic): the host accumulation's gradients, bit for bit, in the
// same order.
TEST_F(GpuWorkloadsGpuTest, AccumulationOnTheDeviceIsBitIdentical) {
  const v1::JobSpec spec =
      Job(R"({"seed": 5, "gradientAccumulationSteps": 3,
              "synthetic": {"numParameters": 50001, "tensorNumel": 20000}})");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> cpu,
                       CreateWorkload(spec, 0, 2));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> gpu,
                       CreateGpuWorkload(spec, 0, 2, 0, nullptr));
  EXPECT_EQ(gpu->samples_per_step(), cpu->samples_per_step());
  for (int64_t step : {1, 4}) {
    ASSERT_OK_AND_ASSIGN(Result c, RunHost(*cpu, step));
    ASSERT_OK_AND_ASSIGN(Result g, RunDevice(*gpu, step));
    EXPECT_EQ(g.order, c.order) << "step " << step;
    EXPECT_EQ(g.grads, c.grads) << "step " << step;
  }
}

TEST_F(GpuWorkloadsGpuTest, AdaptedHostWorkloadIsBitIdentical) {
  const v1::JobSpec spec =
      Job(R"({"seed": 8, "mlp": {"inputDim": 6, "hiddenDims": [10],
                                 "outputDim": 3, "batchSize": 16}})");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> cpu,
                       CreateWorkload(spec, 0, 1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> host,
                       CreateWorkload(spec, 0, 1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> adapted,
                       AdaptHostWorkloadToDevice(std::move(host), 0, nullptr));
  ASSERT_OK_AND_ASSIGN(Result c, RunHost(*cpu, 2));
  ASSERT_OK_AND_ASSIGN(Result g, RunDevice(*adapted, 2));
  EXPECT_EQ(g.order, c.order);
  EXPECT_EQ(g.grads, c.grads);
  EXPECT_EQ(g.loss, c.loss);
}

TEST_F(GpuWorkloadsGpuTest, CublasMlpMatchesTheCpuMlpToRounding) {
  const v1::JobSpec spec =
      Job(R"({"seed": 11, "mlp": {"inputDim": 32, "hiddenDims": [64, 48],
                                  "outputDim": 8, "batchSize": 40}})");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> cpu,
                       CreateWorkload(spec, 1, 2));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Workload> gpu,
                       CreateGpuWorkload(spec, 1, 2, 0, nullptr));
  ASSERT_EQ(gpu->parameters().size(), cpu->parameters().size());
  EXPECT_EQ(gpu->samples_per_step(), 40);
  for (int64_t step : {1, 7}) {
    ASSERT_OK_AND_ASSIGN(Result c, RunHost(*cpu, step));
    ASSERT_OK_AND_ASSIGN(Result g, RunDevice(*gpu, step));
    EXPECT_EQ(g.order, c.order);
    EXPECT_NEAR(g.loss, c.loss, 1e-5 * c.loss) << "step " << step;
    for (size_t i = 0; i < c.grads.size(); ++i) {
      float scale = 0;
      for (float v : c.grads[i]) scale = std::max(scale, std::fabs(v));
      for (size_t j = 0; j < c.grads[i].size(); ++j) {
        ASSERT_NEAR(g.grads[i][j], c.grads[i][j], 1e-4 * scale + 1e-9)
            << "step " << step << " parameter " << i << " element " << j;
      }
    }
  }
}

#endif  // PSHARD_HAS_CUDA

}  // namespace
}  // namespace pshard::worker
