// GpuShardOptimizer against the CPU ShardOptimizer: same spec, same spans,
// same gradients -> same parameters (the contract: within 1e-5 relative; the
// kernels are written to match bit for bit, which is checked too). Skips
// without a GPU; without CUDA it checks that creation reports why.
#include "worker/gpu/gpu_shard_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/comm/communicator.h"
#include "worker/comm/reduce_ops.h"
#include "worker/gpu/gpu_test_util.h"
#include "worker/gpu/optimizer_test_specs.h"
#include "worker/gpu/synthetic.h"
#include "worker/optim/shard_optimizer.h"

#if defined(PSHARD_HAS_CUDA)
#include <cuda_runtime_api.h>

#include "worker/gpu/cuda_util.h"
#include "worker/gpu/kernels.h"
#endif

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

using testing::kAdagradJson;
using testing::kAdamAmsgradJson;
using testing::kAdamJson;
using testing::kAdamScheduleJson;
using testing::kLionJson;
using testing::kRmspropJson;
using testing::kSgdScheduleJson;
using testing::kAdamWJson;
using testing::kSgdDampeningJson;
using testing::kSgdJson;
using testing::Spec;

TEST(GpuShardOptimizerTest, CreateFailsWithAReasonWithoutAGpu) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THAT(GpuShardOptimizer::Create(Spec(kAdamJson), 0),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(why)));
}

#if defined(PSHARD_HAS_CUDA)

using gpu::CudaStatus;
using gpu::DeviceBuffer;

// Large and odd-sized tensors, a gap, misaligned offsets: every kernel path
// (vectorised chunks, scalar heads and tails, several groups).
std::vector<ParamSpan> Spans() {
  return {{"w0", 0, 1000003},
          {"w0.bias", 1000003, 10},
          {"w1", 1000016, 65537},
          {"w1.bias", 1065553, 7},
          {"w2", 1065560, 3}};
}
constexpr int64_t kExtent = 1065563;

std::vector<float> Values(uint64_t seed, int64_t step, int64_t n, float scale) {
  std::vector<float> v(n);
  const uint64_t key = gpu::SyntheticGradKey(seed, 0, step, 0);
  for (int64_t i = 0; i < n; ++i)
    v[i] = gpu::SymmetricUniformAt(key, i) * scale;
  return v;
}

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  absl::StatusOr<DeviceBuffer> buf =
      DeviceBuffer::Allocate(host.size() * sizeof(T), "test upload");
  EXPECT_OK(buf.status());
  EXPECT_OK(
      CudaStatus(cudaMemcpy(buf->get(), host.data(), host.size() * sizeof(T),
                            cudaMemcpyHostToDevice),
                 "upload"));
  // A pageable cudaMemcpy may return before its DMA is done; kernels on
  // non-blocking streams would not wait for it.
  EXPECT_OK(CudaStatus(cudaDeviceSynchronize(), "upload sync"));
  return *std::move(buf);
}

template <typename T>
std::vector<T> Download(const DeviceBuffer& buf, int64_t n) {
  std::vector<T> host(n);
  EXPECT_OK(CudaStatus(cudaDeviceSynchronize(), "sync"));
  EXPECT_OK(CudaStatus(
      cudaMemcpy(host.data(), buf.get(), n * sizeof(T), cudaMemcpyDeviceToHost),
      "download"));
  return host;
}

// Checks the contract (1e-5 relative, absolute near zero) and counts
// bit-identical elements (the kernels are meant to match exactly).
void ExpectSameParams(const std::vector<float>& gpu,
                      const std::vector<float>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  int64_t identical = 0;
  int64_t reported = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &gpu[i], 4);
    std::memcpy(&b, &cpu[i], 4);
    if (a == b) {
      ++identical;
      continue;
    }
    const double tol = 1e-5 * std::max(1e-3, std::fabs(double{cpu[i]}));
    if (!(std::fabs(double{gpu[i]} - double{cpu[i]}) <= tol) &&
        reported++ < 10) {
      ADD_FAILURE() << what << ": element " << i << " GPU " << gpu[i] << " CPU "
                    << cpu[i];
    }
  }
  EXPECT_EQ(identical, static_cast<int64_t>(gpu.size()))
      << what << ": elements not bit-identical to the CPU kernels";
}

class GpuVsCpuTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { PSHARD_SKIP_WITHOUT_GPUS(1); }
};

TEST_P(GpuVsCpuTest, SameGradientsSameParameters) {
  const v1::OptimizerSpec spec = Spec(GetParam());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> cpu,
                       ShardOptimizer::Create(spec));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> gpu,
                       GpuShardOptimizer::Create(spec, 0));
  ASSERT_OK(cpu->AddBucket(5, Spans()));
  ASSERT_OK(gpu->AddBucket(5, Spans()));
  EXPECT_EQ(gpu->state_bytes(5), cpu->state_bytes(5));
  EXPECT_EQ(gpu->total_state_bytes(), cpu->total_state_bytes());

  std::vector<float> host = Values(7, 0, kExtent, 1.0f);
  DeviceBuffer params = Upload(host);
  for (int64_t step = 1; step <= 5; ++step) {
    std::vector<float> grads = Values(7, step, kExtent, 0.1f);
    DeviceBuffer device_grads = Upload(grads);
    ASSERT_OK(cpu->Step(5, host.data(), grads.data()));
    ASSERT_OK(gpu->Step(5, params.as<float>(), device_grads.as<float>()));
  }
  ExpectSameParams(Download<float>(params, kExtent), host, GetParam());
}

TEST_P(GpuVsCpuTest, EnqueuedStepsOnAStreamNeedNoHostSync) {
  const v1::OptimizerSpec spec = Spec(GetParam());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> cpu,
                       ShardOptimizer::Create(spec));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> gpu,
                       GpuShardOptimizer::Create(spec, 0));
  ASSERT_OK(cpu->AddBucket(0, Spans()));
  ASSERT_OK(gpu->AddBucket(0, Spans()));
  ASSERT_OK_AND_ASSIGN(gpu::CudaStream stream,
                       gpu::CudaStream::Create("test stream"));

  std::vector<float> host = Values(9, 0, kExtent, 1.0f);
  DeviceBuffer params = Upload(host);
  std::vector<DeviceBuffer> grads;  // alive until the stream is done
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> g = Values(9, step, kExtent, 0.1f);
    grads.push_back(Upload(g));
    ASSERT_OK(cpu->Step(0, host.data(), g.data()));
    ASSERT_OK(gpu->EnqueueStep(0, params.as<float>(), grads.back().as<float>(),
                               stream.get()));
  }
  ASSERT_OK(CudaStatus(cudaStreamSynchronize(stream.get()), "sync"));
  ExpectSameParams(Download<float>(params, kExtent), host, GetParam());
}

TEST_P(GpuVsCpuTest, Bf16ParamsWithFp32MasterWeights) {
  const v1::OptimizerSpec spec = Spec(GetParam());
  for (const bool bf16_grads : {false, true}) {
    SCOPED_TRACE(bf16_grads ? "bf16 gradients" : "fp32 gradients");
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> cpu,
                         ShardOptimizer::Create(spec));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> gpu,
                         GpuShardOptimizer::Create(spec, 0));
    ASSERT_OK(cpu->AddBucket(1, Spans()));
    // The master copy starts from the exact fp32 values; the model holds them
    // rounded to bf16.
    std::vector<float> master = Values(11, 0, kExtent, 1.0f);
    std::vector<uint16_t> params_bf16(kExtent);
    for (int64_t i = 0; i < kExtent; ++i) {
      params_bf16[i] = FloatToBFloat16(master[i]);
    }
    DeviceBuffer initial = Upload(master);
    DeviceBuffer params = Upload(params_bf16);
    ASSERT_OK(gpu->AddBf16Bucket(1, Spans(), initial.get(),
                                 /*initial_is_bf16=*/false));
    EXPECT_EQ(gpu->state_bytes(1), cpu->state_bytes(1) + kExtent * 4);

    for (int64_t step = 1; step <= 4; ++step) {
      std::vector<float> grads = Values(11, step, kExtent, 0.1f);
      DeviceBuffer device_grads;
      if (bf16_grads) {
        std::vector<uint16_t> g16(kExtent);
        for (int64_t i = 0; i < kExtent; ++i) {
          g16[i] = FloatToBFloat16(grads[i]);
          grads[i] = BFloat16ToFloat(g16[i]);  // what the GPU reads
        }
        device_grads = Upload(g16);
      } else {
        device_grads = Upload(grads);
      }
      ASSERT_OK(cpu->Step(1, master.data(), grads.data()));
      ASSERT_OK(gpu->EnqueueBf16Step(
          1, params.as<uint16_t>(), device_grads.get(),
          bf16_grads ? GpuShardOptimizer::GradType::kBFloat16
                     : GpuShardOptimizer::GradType::kFloat32,
          nullptr));
      ASSERT_OK(CudaStatus(cudaDeviceSynchronize(), "sync"));
    }
    std::vector<float> gpu_master(kExtent);
    ASSERT_OK(gpu->CopyMasterWeightsToHost(1, 0, kExtent, gpu_master.data()));
    // Elements in the gap between spans are never stepped on either side.
    ExpectSameParams(gpu_master, master, GetParam());
    const std::vector<uint16_t> gpu_params =
        Download<uint16_t>(params, kExtent);
    int64_t wrong = 0;
    for (int64_t i = 0; i < kExtent; ++i) {
      const bool in_gap = i >= 1000013 && i < 1000016;
      const uint16_t expected =
          in_gap ? params_bf16[i] : FloatToBFloat16(gpu_master[i]);
      if (gpu_params[i] != expected && wrong++ < 5) {
        ADD_FAILURE() << "bf16 param " << i << " is " << gpu_params[i]
                      << ", expected " << expected;
      }
    }
    EXPECT_EQ(wrong, 0);
  }
}

// Both optimizers' exported state: the same spans, tensors and bits.
void ExpectSameState(const BucketState& gpu, const BucketState& cpu) {
  EXPECT_EQ(gpu.steps, cpu.steps);
  ASSERT_EQ(gpu.spans.size(), cpu.spans.size());
  for (size_t s = 0; s < cpu.spans.size(); ++s) {
    EXPECT_EQ(gpu.spans[s].name, cpu.spans[s].name);
    ASSERT_EQ(gpu.spans[s].tensors.size(), cpu.spans[s].tensors.size());
    for (size_t t = 0; t < cpu.spans[s].tensors.size(); ++t) {
      EXPECT_EQ(gpu.spans[s].tensors[t].first, cpu.spans[s].tensors[t].first);
      ExpectSameParams(gpu.spans[s].tensors[t].second,
                       cpu.spans[s].tensors[t].second,
                       absl::StrCat(cpu.spans[s].name, ".",
                                    cpu.spans[s].tensors[t].first));
    }
  }
}

// What a checkpoint does with the device's state: ViewState brings it to
// the host as the CPU optimizer lays it out, and ImportState into a fresh
// GPU optimizer resumes it: the next steps match the CPU's that never
// stopped.
TEST_P(GpuVsCpuTest, StateExportsAndResumesAsTheCpus) {
  const v1::OptimizerSpec spec = Spec(GetParam());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> cpu,
                       ShardOptimizer::Create(spec));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> gpu,
                       GpuShardOptimizer::Create(spec, 0));
  ASSERT_OK(cpu->AddBucket(2, Spans()));
  ASSERT_OK(gpu->AddBucket(2, Spans()));
  std::vector<float> host = Values(13, 0, kExtent, 1.0f);
  DeviceBuffer params = Upload(host);
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> grads = Values(13, step, kExtent, 0.1f);
    DeviceBuffer device_grads = Upload(grads);
    ASSERT_OK(cpu->Step(2, host.data(), grads.data()));
    ASSERT_OK(gpu->Step(2, params.as<float>(), device_grads.as<float>()));
  }
  ASSERT_OK_AND_ASSIGN(const BucketState saved, cpu->ExportState(2));
  ASSERT_OK_AND_ASSIGN(const BucketState on_gpu, gpu->ExportState(2));
  ExpectSameState(on_gpu, saved);
  EXPECT_THAT(gpu->ViewState(3),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("bucket 3")));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> resumed,
                       GpuShardOptimizer::Create(spec, 0));
  ASSERT_OK(resumed->AddBucket(2, Spans()));
  ASSERT_OK_AND_ASSIGN(const BucketState fresh, resumed->ExportState(2));
  if (!saved.spans.empty()) {
    BucketState wrong = saved;
    wrong.spans[0].name = "other";
    EXPECT_THAT(resumed->ImportState(2, wrong),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("'other'")));
    ASSERT_OK_AND_ASSIGN(const BucketState unchanged, resumed->ExportState(2));
    ExpectSameState(unchanged, fresh);
  }
  ASSERT_OK(resumed->ImportState(2, saved));
  DeviceBuffer resumed_params = Upload(host);
  for (int64_t step = 4; step <= 5; ++step) {
    std::vector<float> grads = Values(13, step, kExtent, 0.1f);
    DeviceBuffer device_grads = Upload(grads);
    ASSERT_OK(cpu->Step(2, host.data(), grads.data()));
    ASSERT_OK(resumed->Step(2, resumed_params.as<float>(),
                            device_grads.as<float>()));
  }
  ExpectSameParams(Download<float>(resumed_params, kExtent), host, GetParam());
  ASSERT_OK_AND_ASSIGN(const BucketState cpu_after, cpu->ExportState(2));
  ASSERT_OK_AND_ASSIGN(const BucketState gpu_after, resumed->ExportState(2));
  ExpectSameState(gpu_after, cpu_after);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, GpuVsCpuTest,
                         ::testing::Values(kSgdJson, kSgdDampeningJson,
                                           kAdamJson, kAdamWJson,
                                           kAdamScheduleJson,
                                           kSgdScheduleJson, kAdamAmsgradJson,
                                           kAdagradJson, kRmspropJson,
                                           kLionJson));

class GpuShardOptimizerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { PSHARD_SKIP_WITHOUT_GPUS(1); }
};

TEST_F(GpuShardOptimizerGpuTest, ErrorsNameTheProblem) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> gpu,
                       GpuShardOptimizer::Create(Spec(kAdamJson), 0));
  ASSERT_OK(gpu->AddBucket(2, {{"a", 0, 16}}));
  EXPECT_THAT(
      gpu->AddBucket(2, {{"b", 0, 16}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already added")));
  EXPECT_THAT(
      gpu->AddBucket(3, {{"a", 0, 16}, {"b", 8, 16}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer buf, DeviceBuffer::Allocate(64, "buf"));
  EXPECT_THAT(gpu->Step(9, buf.as<float>(), buf.as<float>()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("bucket 9")));
  EXPECT_THAT(gpu->Step(2, nullptr, buf.as<float>()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null")));
  EXPECT_THAT(
      gpu->EnqueueBf16Step(2, buf.as<uint16_t>(), buf.get(),
                           GpuShardOptimizer::GradType::kFloat32, nullptr),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("fp32")));
  float master = 0;
  EXPECT_THAT(gpu->CopyMasterWeightsToHost(2, 0, 1, &master),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("fp32 bucket")));
  EXPECT_THAT(
      GpuShardOptimizer::Create(Spec(kAdamJson), 1 << 20),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("does not exist")));
  EXPECT_EQ(gpu->state_bytes(2), 2 * 16 * 4);
  EXPECT_EQ(gpu->state_bytes(3), 0);
}

// AdoptMasterWeights turns an fp32 bucket into a bf16 one (the hook's mixed
// precision): the masters are the host values given, its steps are bf16
// steps, and the state counts the masters.
TEST_F(GpuShardOptimizerGpuTest, AdoptMasterWeightsMakesABf16Bucket) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> gpu,
                       GpuShardOptimizer::Create(Spec(kAdamJson), 0));
  ASSERT_OK(gpu->AddBucket(4, {{"a", 0, 16}}));
  const std::vector<float> initial(16, 1.5f);
  EXPECT_THAT(gpu->AdoptMasterWeights(4, initial.data(), 15),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the bucket spans 16")));
  EXPECT_THAT(gpu->AdoptMasterWeights(7, initial.data(), 16),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("bucket 7")));
  ASSERT_OK(gpu->AdoptMasterWeights(4, initial.data(), 16));
  EXPECT_THAT(gpu->AdoptMasterWeights(4, initial.data(), 16),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("already has master weights")));
  EXPECT_EQ(gpu->state_bytes(4), 3 * 16 * 4);  // moments and masters
  std::vector<float> masters(16);
  ASSERT_OK(gpu->CopyMasterWeightsToHost(4, 0, 16, masters.data()));
  EXPECT_EQ(masters, initial);
  ASSERT_OK_AND_ASSIGN(DeviceBuffer buf, DeviceBuffer::Allocate(64, "buf"));
  EXPECT_THAT(gpu->EnqueueStep(4, buf.as<float>(), buf.as<float>(), nullptr),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("bf16")));

  // A range of them to the host (a checkpoint's owned parameters).
  std::vector<float> range(5, 0.0f);
  ASSERT_OK(gpu->CopyMasterWeightsToHost(4, 11, 5, range.data()));
  EXPECT_EQ(range, std::vector<float>(5, 1.5f));
  EXPECT_THAT(gpu->CopyMasterWeightsToHost(4, 12, 5, range.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("[12, 17) are outside [0, 16)")));
}

TEST_F(GpuShardOptimizerGpuTest, StateMatchesTheCpuLayout) {
  // After one Adam step from zero state: exp_avg = (1 - beta1) g.
  const v1::OptimizerSpec spec = Spec(R"({"kind": "ADAM"})");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> gpu,
                       GpuShardOptimizer::Create(spec, 0));
  const std::vector<ParamSpan> spans = {{"a", 0, 100}, {"b", 104, 50}};
  ASSERT_OK(gpu->AddBucket(0, spans));
  std::vector<float> p(154, 1.0f), g(154);
  for (int i = 0; i < 154; ++i) g[i] = static_cast<float>(i);
  DeviceBuffer dp = Upload(p), dg = Upload(g);
  ASSERT_OK(gpu->Step(0, dp.as<float>(), dg.as<float>()));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer state,
                       DeviceBuffer::Allocate(150 * 4, "s"));
  ASSERT_OK(gpu->CopyState(0, 0, state.as<float>()));
  const std::vector<float> m = Download<float>(state, 150);
  const float omb1 = static_cast<float>(1.0 - 0.9);
  EXPECT_EQ(m[3], 3.0f * omb1);
  EXPECT_EQ(m[100], 104.0f * omb1);  // state is compact: the gap has none
  EXPECT_THAT(gpu->CopyState(0, 2, state.as<float>()),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

// Adagrad's "sum" starts at each group's initial_accumulator_value on the
// device too; RMSprop keeps only the arrays its groups use.
TEST_F(GpuShardOptimizerGpuTest, InitialStateAndKeptArrays) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> adagrad,
                       GpuShardOptimizer::Create(Spec(kAdagradJson), 0));
  ASSERT_OK(adagrad->AddBucket(0, {{"w", 0, 10}, {"w.bias", 12, 3}}));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer state, DeviceBuffer::Allocate(13 * 4, "s"));
  ASSERT_OK(adagrad->CopyState(0, 0, state.as<float>()));
  const std::vector<float> sum = Download<float>(state, 13);
  EXPECT_EQ(sum[0], static_cast<float>(0.1));
  EXPECT_EQ(sum[9], static_cast<float>(0.1));
  EXPECT_EQ(sum[10], static_cast<float>(0.5));
  EXPECT_EQ(sum[12], static_cast<float>(0.5));
  EXPECT_THAT(adagrad->CopyState(0, 1, state.as<float>()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no state")));

  const v1::OptimizerSpec centered_only =
      Spec(R"({"kind": "RMSPROP", "hyperParameters": {"centered": true}})");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> rmsprop,
                       GpuShardOptimizer::Create(centered_only, 0));
  ASSERT_OK(rmsprop->AddBucket(0, {{"w", 0, 16}}));
  EXPECT_EQ(rmsprop->state_bytes(0), 2 * 16 * 4);  // square_avg, grad_avg
  ASSERT_OK_AND_ASSIGN(DeviceBuffer grad_avg,
                       DeviceBuffer::Allocate(16 * 4, "grad_avg"));
  ASSERT_OK(rmsprop->CopyState(0, 2, grad_avg.as<float>()));
  EXPECT_THAT(rmsprop->CopyState(0, 1, grad_avg.as<float>()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no state")));
}

TEST_F(GpuShardOptimizerGpuTest, HelperKernels) {
  const int64_t n = 100003;
  const uint64_t key = gpu::SyntheticGradKey(5, 2, 1, 3);
  ASSERT_OK_AND_ASSIGN(DeviceBuffer a, DeviceBuffer::Allocate(n * 4, "a"));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer b, DeviceBuffer::Allocate(n * 4, "b"));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer h, DeviceBuffer::Allocate(n * 2, "h"));
  ASSERT_OK(CudaStatus(
      gpu::LaunchSyntheticValues(a.as<float>(), n, key, 10, 0.5f, nullptr),
      "synthetic"));
  std::vector<float> synthetic = Download<float>(a, n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(synthetic[i], gpu::SymmetricUniformAt(key, 10 + i) * 0.5f) << i;
  }
  // Copy (both the vector body and the scalar tail), then scale.
  ASSERT_OK(CudaStatus(
      gpu::LaunchCopy(a.as<float>(), b.as<float>(), n, nullptr), "copy"));
  EXPECT_EQ(Download<float>(b, n), synthetic);
  ASSERT_OK(CudaStatus(
      gpu::LaunchScale(b.get(), gpu::kKernelFloat32, n, 0.25f, nullptr),
      "scale"));
  std::vector<float> scaled = Download<float>(b, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(scaled[i], synthetic[i] * 0.25f);
  // bf16 round trip: round to nearest even as the host does, widen exactly.
  ASSERT_OK(CudaStatus(
      gpu::LaunchFloatToBFloat16(a.as<float>(), h.as<uint16_t>(), n, nullptr),
      "to bf16"));
  std::vector<uint16_t> half = Download<uint16_t>(h, n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(half[i], FloatToBFloat16(synthetic[i])) << i;
  }
  ASSERT_OK(CudaStatus(
      gpu::LaunchBFloat16ToFloat(h.as<uint16_t>(), b.as<float>(), n, nullptr),
      "from bf16"));
  std::vector<float> widened = Download<float>(b, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(widened[i], BFloat16ToFloat(half[i]));
  // A mean's division (NCCL's ReduceMean over 3 ranks), as the host's
  // DivideInPlace, in both dtypes.
  ASSERT_OK(CudaStatus(
      gpu::LaunchDivide(b.get(), gpu::kKernelFloat32, n, 3.0f, nullptr),
      "divide fp32"));
  std::vector<float> divided = widened;
  DivideInPlace(divided.data(), n, DataType::kFloat32, 3.0f);
  EXPECT_EQ(Download<float>(b, n), divided);
  ASSERT_OK(CudaStatus(
      gpu::LaunchDivide(h.get(), gpu::kKernelBFloat16, n, 3.0f, nullptr),
      "divide bf16"));
  std::vector<uint16_t> divided_half = half;
  DivideInPlace(divided_half.data(), n, DataType::kBFloat16, 3.0f);
  EXPECT_EQ(Download<uint16_t>(h, n), divided_half);
  // Special values round as the host's FloatToBFloat16 (and torch) do:
  // every NaN to 0x7FC0, infinities kept, the largest floats to infinity.
  const std::vector<float> special = {
      std::nanf(""), -std::nanf(""), std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e-40f,
      std::numeric_limits<float>::max(), -3.3961775e38f, 1.00390625f};
  const int64_t k = static_cast<int64_t>(special.size());
  ASSERT_OK(CudaStatus(cudaMemcpy(a.get(), special.data(), k * 4,
                                  cudaMemcpyHostToDevice),
                       "upload special values"));
  ASSERT_OK(CudaStatus(
      gpu::LaunchFloatToBFloat16(a.as<float>(), h.as<uint16_t>(), k, nullptr),
      "special values to bf16"));
  const std::vector<uint16_t> special_half = Download<uint16_t>(h, k);
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_EQ(special_half[i], FloatToBFloat16(special[i])) << special[i];
  }
}

#endif  // PSHARD_HAS_CUDA

}  // namespace
}  // namespace pshard::worker
