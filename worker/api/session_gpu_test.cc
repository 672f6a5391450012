// A session whose parameters live in CUDA device memory (the C API's
// pshardCudaMemory; pshard.torch's CUDA tensors) against the same session
// on the host: one local rank, the same initial values and gradients, three
// steps, gradients ready in the guessed order or in another (then the first
// step re-packs the device buckets); the parameters come out bit for bit
// the same (the GPU optimizer reproduces the CPU's arithmetic, and one rank
// reduces nothing). Skips without a GPU (tools/gpu_check.sh runs it on one).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/gpu/gpu_test_util.h"

#if PSHARD_HAS_CUDA
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_matchers.h"
#include "worker/api/session.h"
#include "worker/hook/optimizer_state_test_util.h"
#endif

namespace pshard::worker {
namespace {

#if PSHARD_HAS_CUDA

constexpr int kSteps = 3;
const std::vector<std::vector<int64_t>> kShapes = {{7, 5}, {5}, {3, 1, 3}, {}};

const char* Name(DataType dtype) {
  return dtype == DataType::kBFloat16 ? "BF16" : "FP32";
}

size_t ElementBytes(DataType dtype) {
  return dtype == DataType::kBFloat16 ? 2 : 4;
}

// Deterministic values: parameter i's initial values and its step-s
// gradient, as fp32 (narrowed into a bf16 buffer where one is asked for).
float Value(int i, int64_t e, int step) {
  return static_cast<float>(((i * 131 + e * 17 + step * 7) % 23) - 11) /
         (step == 0 ? 16.0f : 64.0f);
}

std::vector<uint8_t> AsBytes(const std::vector<float>& values,
                             DataType dtype) {
  std::vector<uint8_t> bytes(values.size() * ElementBytes(dtype));
  if (dtype == DataType::kFloat32) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  for (size_t e = 0; e < values.size(); ++e) {  // round to nearest even
    uint32_t bits;
    std::memcpy(&bits, &values[e], 4);
    const uint16_t rounded =
        static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    std::memcpy(bytes.data() + 2 * e, &rounded, 2);
  }
  return bytes;
}

// The only rank of a local-mode session, its rendezvous in a fresh
// directory.
absl::StatusOr<std::unique_ptr<Session>> OpenLocalRank() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/s.XXXXXX");
  SessionEnvironment env;
  env.local_store = mkdtemp(dir.data());
  env.timeout = absl::Seconds(60);
  return Session::Open(env);
}

// The order a backward makes the gradients in: the last parameter first
// (what the first layout guesses), or another (a model whose forward does
// not follow its registration order), which the first step re-packs the
// buckets for.
const std::vector<int> kReverseOrder = {3, 2, 1, 0};
const std::vector<int> kShuffledOrder = {1, 3, 0, 2};

// One local rank with its parameters in `memory`, configured and
// prepared, every parameter at its initial values.
std::unique_ptr<Session> OpenPrepared(ParameterMemory memory,
                                      const MixedPrecision& precision,
                                      const std::string& optimizer) {
  absl::StatusOr<std::unique_ptr<Session>> opened = OpenLocalRank();
  EXPECT_OK(opened);
  if (!opened.ok()) return nullptr;
  Session& session = **opened;
  EXPECT_OK(session.SetOptimizerJson(optimizer));
  EXPECT_OK(session.SetPrecision(precision));
  EXPECT_OK(session.SetBucketCapMb(0.0001));  // several buckets
  for (size_t i = 0; i < kShapes.size(); ++i) {
    EXPECT_OK(session
                  .RegisterParameter(absl::StrCat("p", i), kShapes[i],
                                     precision.param_dtype, memory)
                  .status());
  }
  absl::Status prepared = session.Prepare();
  EXPECT_OK(prepared);
  if (!prepared.ok()) return nullptr;
  for (int i = 0; i < session.num_parameters(); ++i) {
    std::vector<float> initial(session.parameter_numel(i));
    for (size_t e = 0; e < initial.size(); ++e) initial[e] = Value(i, e, 0);
    EXPECT_OK(session.SetParameterValues(i, initial));
  }
  return *std::move(opened);
}

// Steps [first, last], each parameter's gradient ready in `ready_order`.
void RunSteps(Session& session, ParameterMemory memory,
              const MixedPrecision& precision,
              const std::vector<int>& ready_order, int first, int last) {
  for (int step = first; step <= last; ++step) {
    for (int i : ready_order) {
      std::vector<float> grad(session.parameter_numel(i));
      for (size_t e = 0; e < grad.size(); ++e) grad[e] = Value(i, e, step);
      const std::vector<uint8_t> bytes =
          AsBytes(grad, precision.reduce_dtype);
      if (memory == ParameterMemory::kCuda) {
        EXPECT_EQ(cudaMemcpy(session.gradient_data(i), bytes.data(),
                             bytes.size(), cudaMemcpyHostToDevice),
                  cudaSuccess);
      } else {
        std::memcpy(session.gradient_data(i), bytes.data(), bytes.size());
      }
      EXPECT_OK(session.GradientReady(i));
    }
    EXPECT_OK(session.FinishStep());
  }
}

// Every parameter's bytes (param_dtype elements).
std::vector<std::vector<uint8_t>> ParameterBytes(
    Session& session, ParameterMemory memory,
    const MixedPrecision& precision) {
  std::vector<std::vector<uint8_t>> params;
  for (int i = 0; i < session.num_parameters(); ++i) {
    std::vector<uint8_t> bytes(session.parameter_numel(i) *
                               ElementBytes(precision.param_dtype));
    if (memory == ParameterMemory::kCuda) {
      EXPECT_EQ(cudaMemcpy(bytes.data(), session.parameter_data(i),
                           bytes.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    } else {
      std::memcpy(bytes.data(), session.parameter_data(i), bytes.size());
    }
    params.push_back(std::move(bytes));
  }
  return params;
}

// Trains one local rank with its parameters in `memory`; returns every
// parameter's final bytes (param_dtype elements).
std::vector<std::vector<uint8_t>> Train(ParameterMemory memory,
                                        const MixedPrecision& precision,
                                        const std::string& optimizer,
                                        const std::vector<int>& ready_order) {
  std::unique_ptr<Session> session =
      OpenPrepared(memory, precision, optimizer);
  if (session == nullptr) return {};
  RunSteps(*session, memory, precision, ready_order, 1, kSteps);
  std::vector<std::vector<uint8_t>> params =
      ParameterBytes(*session, memory, precision);
  EXPECT_OK(session->Close());
  return params;
}

TEST(SessionGpuTest, DeviceMemoryTrainsAsTheHostDoesBitForBit) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  const std::string adamw =
      R"({"kind": "ADAMW", "hyper_parameters": {"lr": 0.01,
          "weight_decay": 0.1}, "max_grad_norm": 0.5,
          "param_groups": [{"params": ["p1"],
                            "hyper_parameters": {"lr": 0.02}}]})";
  const std::string sgd =
      R"({"kind": "SGD", "hyper_parameters": {"lr": 0.05, "momentum": 0.9}})";
  struct Case {
    DataType param_dtype;
    DataType reduce_dtype;
    std::string optimizer;
    std::vector<int> ready_order;
  };
  for (const Case& c :
       {Case{DataType::kFloat32, DataType::kFloat32, adamw, kReverseOrder},
        Case{DataType::kFloat32, DataType::kFloat32, adamw, kShuffledOrder},
        Case{DataType::kFloat32, DataType::kFloat32, sgd, kReverseOrder},
        Case{DataType::kBFloat16, DataType::kFloat32, adamw, kShuffledOrder},
        Case{DataType::kBFloat16, DataType::kBFloat16, sgd, kReverseOrder}}) {
    SCOPED_TRACE(absl::StrCat("param ", Name(c.param_dtype), ", reduce ",
                              Name(c.reduce_dtype), ", ", c.optimizer,
                              ", gradients ready in the order ",
                              absl::StrJoin(c.ready_order, ",")));
    MixedPrecision precision;
    precision.param_dtype = c.param_dtype;
    precision.reduce_dtype = c.reduce_dtype;
    const auto host = Train(ParameterMemory::kHost, precision, c.optimizer,
                            c.ready_order);
    const auto device = Train(ParameterMemory::kCuda, precision, c.optimizer,
                              c.ready_order);
    ASSERT_EQ(host.size(), kShapes.size());
    ASSERT_EQ(device.size(), kShapes.size());
    for (size_t i = 0; i < kShapes.size(); ++i) {
      EXPECT_EQ(host[i], device[i]) << "parameter p" << i;
    }
  }
}

// The optimizer state leaves the device as the host session's does (names,
// step counts and bits), and a new device session that loads it (with the
// parameters' values) trains on as the host session that never stopped:
// pshard.torch's state_dict()/load_state_dict() and the checkpoints' path.
TEST(SessionGpuTest, DeviceOptimizerStateExportsAndResumesAsTheHosts) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  const MixedPrecision fp32;
  for (const std::string& optimizer :
       {std::string(R"({"kind": "ADAMW", "hyper_parameters": {"lr": 0.01,
            "weight_decay": 0.1}, "max_grad_norm": 0.5,
            "param_groups": [{"params": ["p1"],
                              "hyper_parameters": {"lr": 0.02}}]})"),
        std::string(R"({"kind": "SGD", "hyper_parameters": {"lr": 0.05,
            "momentum": 0.9}})")}) {
    SCOPED_TRACE(optimizer);
    std::unique_ptr<Session> host =
        OpenPrepared(ParameterMemory::kHost, fp32, optimizer);
    std::unique_ptr<Session> device =
        OpenPrepared(ParameterMemory::kCuda, fp32, optimizer);
    ASSERT_NE(host, nullptr);
    ASSERT_NE(device, nullptr);
    RunSteps(*host, ParameterMemory::kHost, fp32, kReverseOrder, 1, 2);
    RunSteps(*device, ParameterMemory::kCuda, fp32, kReverseOrder, 1, 2);
    ASSERT_OK_AND_ASSIGN(const Session::OptimizerStateShard saved,
                         host->ExportOptimizerState());
    ASSERT_OK_AND_ASSIGN(const Session::OptimizerStateShard exported,
                         device->ExportOptimizerState());
    EXPECT_EQ(exported.optimizer_json, saved.optimizer_json);
    EXPECT_EQ(exported.parameter_numels, saved.parameter_numels);
    ASSERT_FALSE(saved.params.empty());
    ExpectSameOptimizerState(exported.params, saved.params);
    const std::vector<std::vector<uint8_t>> after_two =
        ParameterBytes(*device, ParameterMemory::kCuda, fp32);
    ASSERT_OK(device->Close());

    std::unique_ptr<Session> resumed =
        OpenPrepared(ParameterMemory::kCuda, fp32, optimizer);
    ASSERT_NE(resumed, nullptr);
    for (int i = 0; i < resumed->num_parameters(); ++i) {
      std::vector<float> values(resumed->parameter_numel(i));
      std::memcpy(values.data(), after_two[i].data(), after_two[i].size());
      ASSERT_OK(resumed->SetParameterValues(i, values));
    }
    ASSERT_OK(resumed->ImportOptimizerState(saved.optimizer_json,
                                            saved.params));
    RunSteps(*host, ParameterMemory::kHost, fp32, kReverseOrder, 3, 4);
    RunSteps(*resumed, ParameterMemory::kCuda, fp32, kReverseOrder, 3, 4);
    const auto want = ParameterBytes(*host, ParameterMemory::kHost, fp32);
    const auto got = ParameterBytes(*resumed, ParameterMemory::kCuda, fp32);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i], want[i]) << "parameter p" << i;
    }
    ASSERT_OK(host->Close());
    ASSERT_OK(resumed->Close());
  }
}

#else  // !PSHARD_HAS_CUDA

TEST(SessionGpuTest, NeedsACudaBuild) {
  GTEST_SKIP() << "pshard was built without CUDA";
}

#endif

}  // namespace
}  // namespace pshard::worker
