// Checkpoint write time and the stall the async writer adds to training, at
// 16M and 64M fp32 parameters with Adam state (3 tensors per parameter:
// value, exp_avg, exp_avg_sq), one rank's shard, fsync included.
//
//   bazel build -c opt //bench/checkpoint:checkpoint_bench
//   bazel-bin/bench/checkpoint/checkpoint_bench --benchmark_dir=/path/on/disk
//
// Per size, one iteration measures in the same run: the synchronous
// WriteShard (write_s), and AsyncCheckpointWriter's Start() (stall_s: the
// snapshot copy, all that training waits for) and its Wait() (async_total_s).
// stall_ratio = stall_s / write_s. first_stall_s is the first async
// checkpoint's stall, which also allocates the snapshot buffers. Reported in docs/BENCHMARKS.md.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "checkpoint/async_writer.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "common/clock.h"

namespace pshard::checkpoint {
namespace {

std::string g_dir;  // set in main() from --benchmark_dir

// `total` parameters in tensors of 1M elements, with Adam state.
struct Model {
  std::vector<std::vector<float>> value, exp_avg, exp_avg_sq;
  std::vector<ParameterTensors> views;
  explicit Model(int64_t total) {
    const int64_t per = int64_t{1} << 20;
    const int64_t count = total / per;
    value.resize(count);
    exp_avg.resize(count);
    exp_avg_sq.resize(count);
    for (int64_t i = 0; i < count; ++i) {
      value[i].assign(per, 0.5f + i);
      exp_avg[i].assign(per, 0.01f * i);
      exp_avg_sq[i].assign(per, 0.001f);
    }
    for (int64_t i = 0; i < count; ++i) {
      views.push_back({absl::StrCat("layer", i, ".weight"),
                       FloatTensor(value[i]),
                       {{"exp_avg", FloatTensor(exp_avg[i])},
                        {"exp_avg_sq", FloatTensor(exp_avg_sq[i])}}});
    }
  }
};

void RemoveShard(const std::string& root, int64_t step) {
  const std::string dir = StepDirectory(root, step);
  unlink(absl::StrCat(dir, "/", ShardFileName(0, 1)).c_str());
  rmdir(dir.c_str());
}

void BM_CheckpointWriteAndStall(benchmark::State& state) {
  const int64_t params = state.range(0) << 20;
  Model model(params);
  std::string root = g_dir + "/pshard-ckpt-bench-XXXXXX";
  if (mkdtemp(root.data()) == nullptr) {
    state.SkipWithError(absl::StrCat("cannot create a directory in ", g_dir).c_str());
    return;
  }
  auto writer = CheckpointWriter::Create(root, 0, 1, "bench");
  if (!writer.ok()) {
    state.SkipWithError(std::string(writer.status().message()).c_str());
    return;
  }
  AsyncCheckpointWriter async(*writer, Clock::Real());
  double write_s = 0, stall_s = 0, async_s = 0;
  int64_t step = 0;
  // A first async checkpoint allocates the snapshot buffers (page faults
  // included); later ones of the same model reuse them. Both are reported.
  {
    const absl::Time t0 = absl::Now();
    const absl::Status started = async.Start(++step, model.views);
    const absl::Time t1 = absl::Now();
    if (!started.ok() || !async.Wait(absl::Minutes(10)).ok()) {
      state.SkipWithError("async write failed");
      return;
    }
    state.counters["first_stall_s"] = absl::ToDoubleSeconds(t1 - t0);
    RemoveShard(root, step);
  }
  for (auto _ : state) {
    const absl::Time t0 = absl::Now();
    auto file = writer->WriteShard(++step, model.views);
    const absl::Time t1 = absl::Now();
    if (!file.ok()) {
      state.SkipWithError(std::string(file.status().message()).c_str());
      return;
    }
    const absl::Status started = async.Start(++step, model.views);
    const absl::Time t2 = absl::Now();
    auto async_file = async.Wait(absl::Minutes(10));
    const absl::Time t3 = absl::Now();
    if (!started.ok() || !async_file.ok()) {
      state.SkipWithError("async write failed");
      return;
    }
    write_s += absl::ToDoubleSeconds(t1 - t0);
    stall_s += absl::ToDoubleSeconds(t2 - t1);
    async_s += absl::ToDoubleSeconds(t3 - t1);
    state.SetIterationTime(absl::ToDoubleSeconds(t1 - t0));
    // Keep the disk use bounded: this iteration's two shards go.
    for (int64_t s : {step - 1, step}) {
      RemoveShard(root, s);
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["params_M"] = static_cast<double>(params >> 20);
  state.counters["shard_MB"] = static_cast<double>(params) * 12 / 1e6;
  state.counters["write_s"] = write_s / n;
  state.counters["write_GBps"] = static_cast<double>(params) * 12 / (write_s / n) / 1e9;
  state.counters["stall_s"] = stall_s / n;
  state.counters["async_total_s"] = async_s / n;
  state.counters["stall_ratio"] = stall_s / write_s;
  rmdir(root.c_str());
}

BENCHMARK(BM_CheckpointWriteAndStall)
    ->Arg(16)
    ->Arg(64)
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pshard::checkpoint

int main(int argc, char** argv) {
  // --benchmark_dir=DIR (default $TMPDIR or /tmp): where shards are written.
  std::vector<char*> rest;
  const char* tmp = getenv("TMPDIR");
  pshard::checkpoint::g_dir = (tmp != nullptr && tmp[0] != '\0') ? tmp : "/tmp";
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_dir=", 16) == 0) {
      pshard::checkpoint::g_dir = argv[i] + 16;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
