// Bandwidth of the CPU optimizer kernels against the machine's memory-copy
// bandwidth, measured in the same process.
//
// Every benchmark reports "GB/s": the bytes of parameter, gradient and state
// the step must read and write per element (Adam: read p, g, m, v and write
// p, m, v = 28 bytes; Adam+amsgrad 36; Adagrad, Lion, plain RMSprop 20;
// centered RMSprop with momentum 36), times elements, per second. The baselines count the
// same way: memcpy moves 8 bytes per float (read + write), the STREAM triad
// a = b + s*c moves 12. The ratio kernel/memcpy says how close a step comes
// to being a pure memory pass. Arg: elements per bucket: 4096 (in L1: the
// compute limit), 16M (64 MiB per array: beyond L2, but a large L3 may hold
// it) and 64M (256 MiB per array: DRAM on most machines).
//
//   bazel run -c opt //bench/optimizer:optimizer_bench -- --benchmark_repetitions=3
//   python3 bench/optimizer/report.py    (table with ratios, plus torch)
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/optim/cpu_kernels.h"
#include "worker/optim/shard_optimizer.h"

namespace pshard::worker {
namespace {

// A 64-byte aligned, initialised float array.
struct Array {
  explicit Array(int64_t n, float value)
      : data(static_cast<float*>(::operator new[](n * sizeof(float),
                                                  std::align_val_t{64}))) {
    for (int64_t i = 0; i < n; ++i) data[i] = value + 1e-7f * (i % 1000);
  }
  ~Array() { ::operator delete[](data, std::align_val_t{64}); }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;
  float* data;
};

void SetRate(benchmark::State& state, int64_t n, int bytes_per_element) {
  const double bytes = static_cast<double>(n) * bytes_per_element;
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["GB/s"] = benchmark::Counter(
      bytes * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
  state.counters["bytes_per_elem"] = bytes_per_element;
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  Array src(n, 1.0f), dst(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data, src.data, n * sizeof(float));
    benchmark::DoNotOptimize(dst.data);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 8);
}

// STREAM "copy" as a plain loop (glibc's memcpy may pick other strategies,
// such as non-temporal stores, for large sizes).
__attribute__((noinline)) void CopyLoop(float* __restrict a,
                                        const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i];
}

void BM_CopyLoop(benchmark::State& state) {
  const int64_t n = state.range(0);
  Array a(n, 0.0f), b(n, 1.0f);
  for (auto _ : state) {
    CopyLoop(a.data, b.data, n);
    benchmark::DoNotOptimize(a.data);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 8);
}

__attribute__((noinline)) void Triad(float* __restrict a,
                                     const float* __restrict b,
                                     const float* __restrict c, float s,
                                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

void BM_Triad(benchmark::State& state) {
  const int64_t n = state.range(0);
  Array a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  for (auto _ : state) {
    Triad(a.data, b.data, c.data, 0.5f, n);
    benchmark::DoNotOptimize(a.data);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 12);
}

void BM_SgdKernel(benchmark::State& state) {
  const int64_t n = state.range(0);
  Array p(n, 1.0f), g(n, 0.01f);
  cpu::SgdScalars s = cpu::MakeSgdScalars(1e-3, 0, 0, false, 0, false);
  for (auto _ : state) {
    cpu::SgdStep(p.data, g.data, nullptr, n, s);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 12);  // read p, g; write p
}

void BM_SgdMomentumKernel(benchmark::State& state) {
  const int64_t n = state.range(0);
  Array p(n, 1.0f), g(n, 0.01f), buf(n, 0.0f);
  cpu::SgdScalars s = cpu::MakeSgdScalars(1e-3, 0.9, 0, true, 1e-4, false);
  for (auto _ : state) {
    cpu::SgdStep(p.data, g.data, buf.data, n, s);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 20);  // read p, g, buf; write p, buf
}

void AdamKernel(benchmark::State& state, bool decoupled) {
  const int64_t n = state.range(0);
  Array p(n, 1.0f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  int64_t step = 0;
  for (auto _ : state) {
    cpu::AdamScalars s = cpu::MakeAdamScalars(1e-3, 0.9, 0.999, 1e-8,
                                              decoupled ? 1e-2 : 0.0,
                                              decoupled, ++step);
    cpu::AdamStep(p.data, g.data, m.data, v.data, nullptr, n, s);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 28);  // read p, g, m, v; write p, m, v
}

// Adam with amsgrad: also reads and writes max_exp_avg_sq.
void BM_AdamAmsgradKernel(benchmark::State& state) {
  const int64_t n = state.range(0);
  Array p(n, 1.0f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f), vmax(n, 0.0f);
  int64_t step = 0;
  for (auto _ : state) {
    const cpu::AdamScalars s = cpu::MakeAdamScalars(
        1e-3, 0.9, 0.999, 1e-8, 0.0, false, ++step, /*amsgrad=*/true);
    cpu::AdamStep(p.data, g.data, m.data, v.data, vmax.data, n, s);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 36);  // read p, g, m, v, vmax; write p, m, v, vmax
}

void BM_AdagradKernel(benchmark::State& state) {
  const int64_t n = state.range(0);
  Array p(n, 1.0f), g(n, 0.01f), sum(n, 0.1f);
  int64_t step = 0;
  for (auto _ : state) {
    const cpu::AdagradScalars s =
        cpu::MakeAdagradScalars(1e-2, 1e-3, 1e-4, 1e-10, ++step);
    cpu::AdagradStep(p.data, g.data, sum.data, n, s);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 20);  // read p, g, sum; write p, sum
}

// RMSprop plain (square_avg only), or centered with momentum (all three
// state tensors).
void RmspropKernel(benchmark::State& state, bool full) {
  const int64_t n = state.range(0);
  Array p(n, 1.0f), g(n, 0.01f), sq(n, 0.0f), buf(n, 0.0f), ga(n, 0.0f);
  const cpu::RmspropScalars s = cpu::MakeRmspropScalars(
      1e-2, 0.99, 1e-8, 0.0, full ? 0.9 : 0.0, /*centered=*/full);
  for (auto _ : state) {
    cpu::RmspropStep(p.data, g.data, sq.data, full ? buf.data : nullptr,
                     full ? ga.data : nullptr, n, s);
    benchmark::ClobberMemory();
  }
  // read p, g, state; write p, state
  SetRate(state, n, full ? 36 : 20);
}

void BM_RmspropKernel(benchmark::State& state) { RmspropKernel(state, false); }
void BM_RmspropCenteredMomentumKernel(benchmark::State& state) {
  RmspropKernel(state, true);
}

void BM_LionKernel(benchmark::State& state) {
  const int64_t n = state.range(0);
  Array p(n, 1.0f), g(n, 0.01f), m(n, 0.0f);
  const cpu::LionScalars s = cpu::MakeLionScalars(1e-4, 0.9, 0.99, 1e-2);
  for (auto _ : state) {
    cpu::LionStep(p.data, g.data, m.data, n, s);
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 20);  // read p, g, m; write p, m
}

void BM_AdamKernel(benchmark::State& state) { AdamKernel(state, false); }

// The same Adam kernel split over range(1) threads (element-wise, so the
// result is bit-identical): does a second core add memory bandwidth?
void BM_AdamKernelThreads(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Array p(n, 1.0f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  int64_t step = 0;
  for (auto _ : state) {
    const cpu::AdamScalars s =
        cpu::MakeAdamScalars(1e-3, 0.9, 0.999, 1e-8, 0.0, false, ++step);
    std::vector<std::thread> pool;
    const int64_t chunk = (n + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
      const int64_t begin = t * chunk;
      const int64_t len = std::min(chunk, n - begin);
      pool.emplace_back([&, begin, len] {
        cpu::AdamStep(p.data + begin, g.data + begin, m.data + begin,
                      v.data + begin, nullptr, len, s);
      });
    }
    for (std::thread& th : pool) th.join();
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 28);
}
void BM_AdamWKernel(benchmark::State& state) { AdamKernel(state, true); }

// The whole ShardOptimizer::Step path for one bucket of 8 parameters, on
// range(1) threads (CpuOptimizerOptions::num_threads).
void BM_ShardOptimizerAdamStep(benchmark::State& state) {
  const int64_t n = state.range(0);
  v1::OptimizerSpec spec;
  spec.set_kind(v1::OptimizerSpec::ADAM);
  CpuOptimizerOptions options;
  options.num_threads = static_cast<int>(state.range(1));
  auto opt = ShardOptimizer::Create(spec, options);
  if (!opt.ok()) {
    state.SkipWithError(std::string(opt.status().message()).c_str());
    return;
  }
  std::vector<ParamSpan> spans;
  const int64_t per = n / 8;
  for (int i = 0; i < 8; ++i) {
    spans.push_back({"p" + std::to_string(i), i * per, i == 7 ? n - 7 * per : per});
  }
  if (!(*opt)->AddBucket(0, spans).ok()) {
    state.SkipWithError("AddBucket failed");
    return;
  }
  Array p(n, 1.0f), g(n, 0.01f);
  for (auto _ : state) {
    if (!(*opt)->Step(0, p.data, g.data).ok()) {
      state.SkipWithError("Step failed");
      return;
    }
    benchmark::ClobberMemory();
  }
  SetRate(state, n, 28);
}

constexpr int64_t kSmall = 4096;                 // in L1/L2: compute bound
constexpr int64_t kDefault = int64_t{1} << 24;  // 16M elements (64 MiB each)
// 64M elements: 256 MiB per array, so even memcpy's two arrays exceed a
// 480 MiB L3 (the CI machine's): the DRAM-bound figure.
constexpr int64_t kLarge = int64_t{1} << 26;

#define PSHARD_BENCH(fn) \
  BENCHMARK(fn)                                           \
      ->Arg(kSmall)                                       \
      ->Arg(kDefault)                                     \
      ->Arg(kLarge)                                       \
      ->Unit(benchmark::kMillisecond)                     \
      ->UseRealTime()

PSHARD_BENCH(BM_Memcpy);
PSHARD_BENCH(BM_CopyLoop);
PSHARD_BENCH(BM_Triad);
PSHARD_BENCH(BM_SgdKernel);
PSHARD_BENCH(BM_SgdMomentumKernel);
PSHARD_BENCH(BM_AdamKernel);
PSHARD_BENCH(BM_AdamWKernel);
PSHARD_BENCH(BM_AdamAmsgradKernel);
PSHARD_BENCH(BM_AdagradKernel);
PSHARD_BENCH(BM_RmspropKernel);
PSHARD_BENCH(BM_RmspropCenteredMomentumKernel);
PSHARD_BENCH(BM_LionKernel);
BENCHMARK(BM_AdamKernelThreads)
    ->Args({kDefault, 2})
    ->Args({kLarge, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ShardOptimizerAdamStep)
    ->Args({kSmall, 1})
    ->Args({kDefault, 1})
    ->Args({kLarge, 1})
    ->Args({kDefault, 2})
    ->Args({kLarge, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace pshard::worker
