// GPU benchmark: the fused optimizer kernels' memory bandwidth against the
// device's own copy bandwidth, measured in the same run, and the step time of
// a 1-GPU job (GpuZeroHook + GPU synthetic workload: gradients -> NCCL reduce
// -> owner's Adam step on the communication stream -> NCCL broadcast).
//
//   bazel run //bench/gpu:gpu_bench -- --elements=67108864
//
// Bandwidth = bytes the kernel must move (each array read or written once per
// element) / time, timed with CUDA events over --iters launches after warm-up.
// The reference is cudaMemcpyAsync device-to-device (read + write). The goal
// is optimizer bandwidth >= 80% of the copy's. The last line is a one-line
// summary for tools/gpu_check.sh. Exits 2 when there is no GPU.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/gpu/device.h"

#if defined(PSHARD_HAS_CUDA)
#include <cuda_runtime_api.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/bucket/bucket_layout.h"
#include "worker/comm/kv_store.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/gpu_shard_optimizer.h"
#include "worker/gpu/gpu_workloads.h"
#include "worker/gpu/gpu_zero_hook.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/nccl_communicator.h"
#include "worker/hook/zero_hook.h"
#include "worker/workload/workload.h"
#endif

ABSL_FLAG(int64_t, elements, int64_t{1} << 26,
          "parameters per optimizer benchmark (fp32 elements)");
ABSL_FLAG(int, iters, 20, "timed iterations per measurement");
ABSL_FLAG(int, device, 0, "CUDA device");
ABSL_FLAG(int64_t, step_params, int64_t{1} << 27,
          "parameters of the 1-GPU step benchmark (0: skip it)");
ABSL_FLAG(double, bucket_cap_mb, 25, "bucket size of the step benchmark");
ABSL_FLAG(int, steps, 10, "timed steps of the step benchmark");

#if defined(PSHARD_HAS_CUDA)
namespace pshard::worker {
namespace {

using gpu::CudaStatus;
using gpu::CudaStream;
using gpu::DeviceBuffer;

#define BENCH_CHECK_OK(expr)                          \
  do {                                                \
    const absl::Status bench_status_ = (expr);        \
    if (!bench_status_.ok()) {                        \
      std::fprintf(stderr, "gpu_bench: %s\n",         \
                   bench_status_.ToString().c_str()); \
      std::exit(1);                                   \
    }                                                 \
  } while (false)

template <typename T>
T CheckValue(absl::StatusOr<T> v) {
  BENCH_CHECK_OK(v.status());
  return *std::move(v);
}

// Times `iters` calls of `op` on `stream` with CUDA events (after 3 warm-up
// calls); returns seconds per call.
template <typename Op>
double TimeOnStream(cudaStream_t stream, int iters, Op op) {
  for (int i = 0; i < 3; ++i) op();
  cudaEvent_t start, stop;
  BENCH_CHECK_OK(CudaStatus(cudaEventCreate(&start), "cudaEventCreate"));
  BENCH_CHECK_OK(CudaStatus(cudaEventCreate(&stop), "cudaEventCreate"));
  BENCH_CHECK_OK(CudaStatus(cudaEventRecord(start, stream), "record"));
  for (int i = 0; i < iters; ++i) op();
  BENCH_CHECK_OK(CudaStatus(cudaEventRecord(stop, stream), "record"));
  BENCH_CHECK_OK(CudaStatus(cudaEventSynchronize(stop), "sync"));
  float ms = 0;
  BENCH_CHECK_OK(CudaStatus(cudaEventElapsedTime(&ms, start, stop), "elapsed"));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3 / iters;
}

DeviceBuffer Filled(int64_t n, uint64_t key, float scale, cudaStream_t s) {
  DeviceBuffer buf = CheckValue(DeviceBuffer::Allocate(n * 4, "bench buffer"));
  BENCH_CHECK_OK(CudaStatus(
      gpu::LaunchSyntheticValues(buf.as<float>(), n, key, 0, scale, s),
      "fill"));
  return buf;
}

v1::OptimizerSpec Spec(const char* json) {
  v1::OptimizerSpec spec;
  if (!google::protobuf::util::JsonStringToMessage(json, &spec).ok()) {
    std::fprintf(stderr, "gpu_bench: bad spec %s\n", json);
    std::exit(1);
  }
  return spec;
}

// Spans of 1M elements (the last shorter): a bucket of many tensors, stepped
// by one multi-tensor launch.
std::vector<ParamSpan> Spans(int64_t n) {
  std::vector<ParamSpan> spans;
  const int64_t per = int64_t{1} << 20;
  for (int64_t off = 0, i = 0; off < n; off += per, ++i) {
    spans.push_back({absl::StrCat("t", i), off, std::min(per, n - off)});
  }
  return spans;
}

struct OptResult {
  std::string name;
  double gbps = 0;
};

OptResult BenchOptimizer(const char* name, const char* json, bool bf16,
                         int64_t n, int iters, int device, cudaStream_t s) {
  std::unique_ptr<GpuShardOptimizer> opt =
      CheckValue(GpuShardOptimizer::Create(Spec(json), device));
  DeviceBuffer params = Filled(n, 1, 1.0f, s);
  DeviceBuffer grads = Filled(n, 2, 0.01f, s);
  DeviceBuffer params_bf16;
  BENCH_CHECK_OK(CudaStatus(cudaStreamSynchronize(s), "sync"));
  if (bf16) {
    params_bf16 = CheckValue(DeviceBuffer::Allocate(n * 2, "bf16 params"));
    BENCH_CHECK_OK(opt->AddBf16Bucket(0, Spans(n), params.get(), false));
  } else {
    BENCH_CHECK_OK(opt->AddBucket(0, Spans(n)));
  }
  const int64_t state_bytes = opt->state_bytes(0);
  const int arrays =
      static_cast<int>((bf16 ? state_bytes - n * 4 : state_bytes) / (n * 4));
  // Per element: state arrays read + written; gradient read; parameters read
  // + written (fp32), or master read + written plus a bf16 write.
  const double bytes_per_element = 8.0 * arrays + 4 + (bf16 ? 8 + 2 : 8);
  const double seconds = TimeOnStream(s, iters, [&] {
    if (bf16) {
      BENCH_CHECK_OK(
          opt->EnqueueBf16Step(0, params_bf16.as<uint16_t>(), grads.get(),
                               GpuShardOptimizer::GradType::kFloat32, s));
    } else {
      BENCH_CHECK_OK(
          opt->EnqueueStep(0, params.as<float>(), grads.as<float>(), s));
    }
  });
  OptResult r;
  r.name = name;
  r.gbps = bytes_per_element * n / seconds / 1e9;
  std::printf("  %-28s %8.1f GB/s  (%.0f B/element, %.3f ms/step)\n", name,
              r.gbps, bytes_per_element, seconds * 1e3);
  return r;
}

// The step of a 1-GPU job, as the worker runs it: the synthetic workload
// generates gradients on the compute stream, the GpuZeroHook reduces each
// bucket over NCCL, runs the owner's Adam step on the communication stream
// and broadcasts it; FinishStep waits for the step. Host-timed, per step.
double BenchStep(int64_t total, double cap_mb, int steps, int device) {
  InMemoryKvStore kv;
  NcclOptions options;
  options.job_id = "gpu-bench";
  options.device = device;
  std::unique_ptr<NcclCommunicator> comm =
      CheckValue(CreateNcclCommunicator(options, kv));
  const v1::OptimizerSpec spec = Spec(R"({"kind": "ADAM"})");
  std::unique_ptr<GpuShardOptimizer> opt =
      CheckValue(GpuShardOptimizer::Create(spec, device));
  CudaStream compute = CheckValue(CudaStream::Create("compute stream"));
  v1::SyntheticWorkload synthetic;
  synthetic.set_num_parameters(total);
  std::unique_ptr<Workload> workload = CheckValue(CreateGpuSyntheticWorkload(
      synthetic, /*seed=*/1, /*rank=*/0, device, compute.get()));
  GpuZeroHookOptions hook_options;
  hook_options.bucket_cap_mb = cap_mb;
  hook_options.compute_stream = compute.get();
  AssignmentProvider provider =
      [](const BucketLayout& layout) -> absl::StatusOr<BucketAssignment> {
    BucketAssignment a;
    a.epoch = 1;
    a.owners.assign(layout.num_buckets(), 0);
    return a;
  };
  std::unique_ptr<GpuZeroHook> hook =
      CheckValue(GpuZeroHook::Create(workload->parameters(), comm.get(),
                                     std::move(opt), provider, hook_options));
  BENCH_CHECK_OK(workload->InitializeParameters(hook->params()));
  auto one_step = [&](int64_t step) {
    std::vector<const float*> params(hook->params().begin(),
                                     hook->params().end());
    BENCH_CHECK_OK(
        workload->ComputeGradients(step, params, hook->grads(), *hook)
            .status());
    BENCH_CHECK_OK(hook->FinishStep());
  };
  for (int64_t s = 1; s <= 3; ++s) one_step(s);  // includes the rebuild step
  // A benchmark measures real elapsed time: absl::Now, not a Clock.
  const absl::Time start = absl::Now();
  for (int64_t s = 4; s < 4 + steps; ++s) one_step(s);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start) / steps;
  std::printf(
      "  1-GPU job step: %lld params, %d buckets of %.0f MiB, Adam: "
      "%.3f ms/step (synthetic gradients + reduce + step + broadcast)\n",
      static_cast<long long>(total), hook->layout().num_buckets(), cap_mb,
      seconds * 1e3);
  return seconds;
}

int Run() {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) {
    std::fprintf(stderr, "gpu_bench: no CUDA device: %s\n", why.c_str());
    return 2;
  }
  const int device = absl::GetFlag(FLAGS_device);
  BENCH_CHECK_OK(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  std::printf("device %d: %s\n", device,
              CheckValue(CudaDeviceDescription(device)).c_str());
  const int64_t n = absl::GetFlag(FLAGS_elements);
  const int iters = absl::GetFlag(FLAGS_iters);
  CudaStream stream = CheckValue(CudaStream::Create("bench stream"));
  cudaStream_t s = stream.get();

  std::printf("copy bandwidth (%lld floats, read + write):\n",
              static_cast<long long>(n));
  DeviceBuffer a = Filled(n, 4, 1.0f, s);
  DeviceBuffer b = CheckValue(DeviceBuffer::Allocate(n * 4, "copy dst"));
  const double memcpy_s = TimeOnStream(s, iters, [&] {
    BENCH_CHECK_OK(CudaStatus(
        cudaMemcpyAsync(b.get(), a.get(), n * 4, cudaMemcpyDeviceToDevice, s),
        "cudaMemcpyAsync"));
  });
  const double memcpy_gbps = 8.0 * n / memcpy_s / 1e9;
  std::printf("  %-28s %8.1f GB/s\n", "cudaMemcpyAsync D2D", memcpy_gbps);
  const double kernel_s = TimeOnStream(s, iters, [&] {
    BENCH_CHECK_OK(CudaStatus(
        gpu::LaunchCopy(a.as<float>(), b.as<float>(), n, s), "copy kernel"));
  });
  std::printf("  %-28s %8.1f GB/s\n", "copy kernel", 8.0 * n / kernel_s / 1e9);
  a = DeviceBuffer();
  b = DeviceBuffer();

  std::printf(
      "optimizer kernels (%lld parameters in 1M-element tensors, one "
      "launch per step):\n",
      static_cast<long long>(n));
  std::vector<OptResult> results;
  results.push_back(BenchOptimizer(
      "sgd momentum fp32",
      R"({"kind": "SGD", "hyperParameters": {"lr": 0.1, "momentum": 0.9}})",
      false, n, iters, device, s));
  results.push_back(BenchOptimizer(
      "adam fp32",
      R"({"kind": "ADAM", "hyperParameters": {"weightDecay": 0.01}})", false, n,
      iters, device, s));
  results.push_back(BenchOptimizer("adamw fp32", R"({"kind": "ADAMW"})", false,
                                   n, iters, device, s));
  results.push_back(BenchOptimizer("adamw bf16 + fp32 master",
                                   R"({"kind": "ADAMW"})", true, n, iters,
                                   device, s));
  results.push_back(BenchOptimizer(
      "adam amsgrad fp32", R"({"kind": "ADAM", "hyperParameters": {"amsgrad": true}})",
      false, n, iters, device, s));
  results.push_back(BenchOptimizer(
      "adagrad fp32",
      R"({"kind": "ADAGRAD", "hyperParameters": {"lrDecay": 0.01}})", false, n,
      iters, device, s));
  results.push_back(BenchOptimizer("rmsprop fp32", R"({"kind": "RMSPROP"})",
                                   false, n, iters, device, s));
  results.push_back(BenchOptimizer(
      "rmsprop centered+mom fp32",
      R"({"kind": "RMSPROP", "hyperParameters": {"centered": true, "momentum": 0.9}})",
      false, n, iters, device, s));
  results.push_back(BenchOptimizer(
      "lion fp32", R"({"kind": "LION", "hyperParameters": {"weightDecay": 0.01}})",
      false, n, iters, device, s));
  double worst = 1e9;
  for (const OptResult& r : results) {
    const double ratio = r.gbps / memcpy_gbps;
    worst = std::min(worst, ratio);
    std::printf("  %-28s %5.1f%% of cudaMemcpy  %s\n", r.name.c_str(),
                100 * ratio,
                ratio >= 0.8 ? "(goal >= 80%: met)" : "(goal >= 80%: NOT met)");
  }

  double step_ms = -1;
  const int64_t step_params = absl::GetFlag(FLAGS_step_params);
  if (step_params > 0) {
    std::printf("1-GPU job step (NCCL world size 1):\n");
    step_ms = 1e3 * BenchStep(step_params, absl::GetFlag(FLAGS_bucket_cap_mb),
                              absl::GetFlag(FLAGS_steps), device);
  }
  std::printf(
      "SUMMARY memcpy_d2d_gbps=%.1f adam_fp32_gbps=%.1f adam_fp32_pct=%.1f "
      "worst_optimizer_pct=%.1f goal_80pct=%s step_ms=%.3f\n",
      memcpy_gbps, results[1].gbps, 100 * results[1].gbps / memcpy_gbps,
      100 * worst, worst >= 0.8 ? "met" : "not_met", step_ms);
  return 0;
}

}  // namespace
}  // namespace pshard::worker
#endif  // PSHARD_HAS_CUDA

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
#if defined(PSHARD_HAS_CUDA)
  return pshard::worker::Run();
#else
  std::string why;
  pshard::worker::CudaDeviceCount(&why);
  std::fprintf(stderr, "gpu_bench: no CUDA device: %s\n", why.c_str());
  return 2;
#endif
}
