// GpuZeroHook end to end against the CPU ZeroHook: same job (workload, seed,
// optimizer, bucket cap, assignment policy), the CPU path on FakeCommunicator
// with the CPU optimizer, the GPU path on NCCL with the CUDA kernels and the
// GPU workloads -> the same parameters after every step. World size 1 on one
// GPU; 2 ranks as threads with two GPUs. Skips without a GPU.
#include "worker/gpu/gpu_zero_hook.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/bucket/bucket_layout.h"
#include "worker/comm/fake_communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"
#include "worker/gpu/gpu_job.h"
#include "worker/gpu/gpu_shard_optimizer.h"
#include "worker/gpu/gpu_test_util.h"
#include "worker/gpu/gpu_workloads.h"
#include "worker/gpu/nccl_communicator.h"
#include "worker/hook/optimizer_state_test_util.h"
#include "worker/hook/zero_hook.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/runtime/assignment_client.h"
#include "worker/runtime/cpu_job.h"
#include "worker/workload/workload.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Job(const std::string& json) {
  v1::JobSpec spec;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &spec);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << json;
  return spec;
}

// Small buckets (16 KiB) so that a step has several, odd tensor sizes.
const char kSyntheticAdamJob[] = R"({
  "name": "gpu-hook", "worldSize": 1, "steps": 4, "seed": 17,
  "synthetic": {"numParameters": 20011, "tensorNumel": 3000},
  "bucketCapMb": 0.015625,
  "optimizer": {"kind": "ADAM", "hyperParameters": {"lr": 0.01,
                "weightDecay": 0.05}}})";

// The mlp job in one bucket (25 MB cap).
const char kMlpSgdJob[] = R"({
  "name": "gpu-hook-mlp", "worldSize": 1, "steps": 3, "seed": 5,
  "mlp": {"inputDim": 8, "hiddenDims": [16, 12], "outputDim": 4,
          "batchSize": 32},
  "bucketCapMb": 25,
  "optimizer": {"kind": "SGD", "hyperParameters": {"lr": 0.05,
                "momentum": 0.9, "nesterov": true}}})";

using Parameters = std::vector<std::vector<float>>;

// The hook's mode for `spec`, as GpuJob and the job runner choose it.
v1::JobSpec::CommMode CommMode(const v1::JobSpec& spec) {
  return spec.comm_mode() == v1::JobSpec::ALLREDUCE_BROADCAST
             ? v1::JobSpec::ALLREDUCE_BROADCAST
             : v1::JobSpec::REDUCE_BROADCAST;
}

// The job runner's step loop, the same for both hooks (a GpuZeroHook is a
// ZeroHook on device memory); then every parameter, brought to the host by
// `download(i, out)`.
absl::StatusOr<Parameters> Train(
    const v1::JobSpec& spec, Workload& workload, ZeroHook& hook,
    const std::function<absl::Status(int, float*)>& download) {
  RETURN_IF_ERROR(workload.InitializeParameters(hook.params()));
  for (int64_t step = 1; step <= spec.steps(); ++step) {
    std::vector<const float*> params(hook.params().begin(),
                                     hook.params().end());
    RETURN_IF_ERROR(
        workload.ComputeGradients(step, params, hook.grads(), hook).status());
    RETURN_IF_ERROR(hook.FinishStep());
  }
  if (hook.state() != HookState::kInitialized) {
    return absl::InternalError("hook not initialised after the steps");
  }
  Parameters out;
  const std::vector<ParameterInfo>& infos = hook.parameter_infos();
  for (size_t i = 0; i < infos.size(); ++i) {
    out.emplace_back(infos[i].numel);
    RETURN_IF_ERROR(download(static_cast<int>(i), out.back().data()));
  }
  return out;
}

// The reference: the CPU hook on a FakeCommunicator, every rank of
// spec.world_size(). Returns each rank's final parameters.
absl::StatusOr<std::vector<Parameters>> RunCpu(const v1::JobSpec& spec) {
  const int world = spec.world_size();
  FakeHub hub(world);
  return RunRanksFor<Parameters>(world, [&](int rank) -> absl::StatusOr<Parameters> {
    std::unique_ptr<Communicator> comm = hub.Create(rank);
    ASSIGN_OR_RETURN(std::unique_ptr<Workload> workload,
                     CreateWorkload(spec, rank, world));
    ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> opt,
                     ShardOptimizer::Create(spec.optimizer()));
    ZeroHookOptions options;
    options.comm_mode = CommMode(spec);
    options.bucket_cap_mb = spec.bucket_cap_mb();
    options.clipping = GradClipping::FromSpec(spec.optimizer());
    ASSIGN_OR_RETURN(
        std::unique_ptr<ZeroHook> hook,
        ZeroHook::Create(workload->parameters(), comm.get(), std::move(opt),
                         LocalAssignmentProvider(spec.assignment_policy(), world), options));
    return Train(spec, *workload, *hook, [&](int i, float* out) {
      std::copy_n(hook->params()[i], hook->parameter_infos()[i].numel, out);
      return absl::OkStatus();
    });
  });
}

// The GPU path, rank r on CUDA device r: NCCL, the CUDA optimizer, and the
// GPU workload (or, with `adapt_host`, the CPU workload behind the pinned
// host adapter).
absl::StatusOr<std::vector<Parameters>> RunGpu(const v1::JobSpec& spec,
                                               bool adapt_host) {
  const int world = spec.world_size();
  InMemoryKvStore kv;
  return RunRanksFor<Parameters>(world, [&](int rank) -> absl::StatusOr<Parameters> {
    NcclOptions nccl;
    nccl.job_id = spec.name();
    nccl.epoch = 1;
    nccl.rank = rank;
    nccl.world_size = world;
    nccl.device = rank;
    ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                     CreateNcclCommunicator(nccl, kv));
    ASSIGN_OR_RETURN(std::unique_ptr<GpuShardOptimizer> opt,
                     GpuShardOptimizer::Create(spec.optimizer(), rank));
    // The compute stream: the legacy default stream keeps the test simple;
    // the hook orders the communication stream after it with events.
    std::unique_ptr<Workload> workload;
    if (adapt_host) {
      ASSIGN_OR_RETURN(std::unique_ptr<Workload> host,
                       CreateWorkload(spec, rank, world));
      ASSIGN_OR_RETURN(workload, AdaptHostWorkloadToDevice(std::move(host),
                                                           rank, nullptr));
    } else {
      ASSIGN_OR_RETURN(workload,
                       CreateGpuWorkload(spec, rank, world, rank, nullptr));
    }
    GpuZeroHookOptions options;
    options.comm_mode = CommMode(spec);
    options.bucket_cap_mb = spec.bucket_cap_mb();
    options.clipping = GradClipping::FromSpec(spec.optimizer());
    ASSIGN_OR_RETURN(
        std::unique_ptr<GpuZeroHook> hook,
        GpuZeroHook::Create(workload->parameters(), comm.get(), std::move(opt),
                            LocalAssignmentProvider(spec.assignment_policy(), world), options));
    return Train(spec, *workload, *hook, [&](int i, float* out) {
      return hook->CopyParameterToHost(i, out);
    });
  });
}

// kSyntheticAdamJob with `precision`, defaults applied and valid, as the
// job runner gives a job its spec.
v1::JobSpec SyntheticJob(v1::PrecisionSpec::DType param,
                         v1::PrecisionSpec::DType reduce,
                         int accumulation = 1) {
  v1::JobSpec spec = Job(kSyntheticAdamJob);
  spec.mutable_precision()->set_param_dtype(param);
  spec.mutable_precision()->set_reduce_dtype(reduce);
  spec.set_gradient_accumulation_steps(accumulation);
  spec = ApplyJobSpecDefaults(spec);
  EXPECT_OK(ValidateJobSpec(spec));
  return spec;
}

// One-rank jobs on `spec`, each with its own store (`job_id` names the
// GPU job's NCCL rendezvous).
absl::StatusOr<std::unique_ptr<CpuJob>> OneRankCpuJob(const v1::JobSpec& spec,
                                                      KvClient& kv) {
  return CpuJob::Create(spec, CpuJobOptions(), kv,
                        LocalAssignmentProvider(v1::JobSpec::BALANCED, 1));
}
absl::StatusOr<std::unique_ptr<GpuJob>> OneRankGpuJob(const v1::JobSpec& spec,
                                                      const std::string& job_id,
                                                      KvClient& kv) {
  GpuJobOptions options;
  options.job_id = job_id;
  return GpuJob::Create(spec, options, kv,
                        LocalAssignmentProvider(v1::JobSpec::BALANCED, 1));
}

// Within `relative` of the CPU path, elementwise (clipping's norm is summed
// in another order on the device, so its coefficient may differ in the last
// bit).
void ExpectClose(const Parameters& gpu, const Parameters& cpu,
                 double relative) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    ASSERT_EQ(gpu[i].size(), cpu[i].size());
    for (size_t j = 0; j < gpu[i].size(); ++j) {
      const double a = gpu[i][j], b = cpu[i][j];
      ASSERT_LE(std::fabs(a - b), relative * std::max(1e-3, std::fabs(b)))
          << "parameter " << i << " element " << j;
    }
  }
}

void ExpectSame(const Parameters& gpu, const Parameters& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  int64_t differing = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    ASSERT_EQ(gpu[i].size(), cpu[i].size());
    for (size_t j = 0; j < gpu[i].size(); ++j) {
      const float a = gpu[i][j];
      const float b = cpu[i][j];
      if (std::memcmp(&a, &b, 4) == 0) continue;
      ++differing;
      const double tol = 1e-5 * std::max(1e-3, std::fabs(double{b}));
      ASSERT_LE(std::fabs(double{a} - double{b}), tol)
          << "parameter " << i << " element " << j;
    }
  }
  EXPECT_EQ(differing, 0) << "elements not bit-identical to the CPU path";
}

TEST(GpuZeroHookTest, CreateRefusesMissingPieces) {
  // InvalidArgument where CUDA is built in, Unavailable in CPU-only builds.
  const absl::Status status =
      GpuZeroHook::Create({{"w", {4}, 4}}, nullptr, nullptr, nullptr,
                          GpuZeroHookOptions())
          .status();
  EXPECT_THAT(status.code(),
              ::testing::AnyOf(absl::StatusCode::kInvalidArgument,
                               absl::StatusCode::kUnavailable))
      << status;
}

TEST(GpuZeroHookTest, OneGpuSyntheticMatchesTheCpuHook) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  const v1::JobSpec spec = Job(kSyntheticAdamJob);
  ASSERT_OK_AND_ASSIGN(auto cpu, RunCpu(spec));
  ASSERT_OK_AND_ASSIGN(auto gpu, RunGpu(spec, /*adapt_host=*/false));
  ExpectSame(gpu[0], cpu[0]);
}

TEST(GpuZeroHookTest, OneGpuAdaptedHostWorkloadMatchesTheCpuHook) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  for (const char* json : {kMlpSgdJob, kSyntheticAdamJob}) {
    SCOPED_TRACE(json);
    const v1::JobSpec spec = Job(json);
    ASSERT_OK_AND_ASSIGN(auto cpu, RunCpu(spec));
    ASSERT_OK_AND_ASSIGN(auto gpu, RunGpu(spec, /*adapt_host=*/true));
    ExpectSame(gpu[0], cpu[0]);
  }
}

TEST(GpuZeroHookTest, OneGpuCublasMlpTracksTheCpuHook) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  // Same problem, matrix products summed in another order: close, not equal.
  const v1::JobSpec spec = Job(kMlpSgdJob);
  ASSERT_OK_AND_ASSIGN(auto cpu_ranks, RunCpu(spec));
  ASSERT_OK_AND_ASSIGN(auto gpu_ranks, RunGpu(spec, /*adapt_host=*/false));
  const Parameters& cpu = cpu_ranks[0];
  const Parameters& gpu = gpu_ranks[0];
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    ASSERT_EQ(gpu[i].size(), cpu[i].size());
    for (size_t j = 0; j < gpu[i].size(); ++j) {
      ASSERT_NEAR(gpu[i][j], cpu[i][j],
                  1e-5 * std::max(1.0f, std::fabs(cpu[i][j])))
          << "parameter " << i << " element " << j;
    }
  }
}

TEST(GpuZeroHookTest, MissingGradientFailsTheStep) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  const v1::JobSpec spec = Job(kSyntheticAdamJob);
  InMemoryKvStore kv;
  NcclOptions nccl;
  nccl.job_id = "missing";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NcclCommunicator> comm,
                       CreateNcclCommunicator(nccl, kv));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> opt,
                       GpuShardOptimizer::Create(spec.optimizer(), 0));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<GpuZeroHook> hook,
      GpuZeroHook::Create({{"a", {10}, 10}, {"b", {10}, 10}}, comm.get(),
                          std::move(opt), LocalAssignmentProvider(v1::JobSpec::BALANCED, 1), GpuZeroHookOptions()));
  hook->GradientReady(1);
  EXPECT_THAT(
      hook->MarkGradientReady(1),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("twice")));
  EXPECT_THAT(
      hook->FinishStep(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("\"a\"")));
  // The failure aborted the communicator.
  EXPECT_FALSE(comm->health().ok());
}

TEST(GpuJobTest, OneGpuJobMatchesTheCpuHook) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  // GpuJob takes a spec with its defaults, as the job runner gives it.
  const v1::JobSpec spec = ApplyJobSpecDefaults(Job(kSyntheticAdamJob));
  ASSERT_OK_AND_ASSIGN(auto cpu, RunCpu(spec));
  InMemoryKvStore kv;
  GpuJobOptions options;
  options.job_id = "gpu-job";
  options.epoch = 3;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuJob> job,
                       GpuJob::Create(spec, options, kv, LocalAssignmentProvider(v1::JobSpec::BALANCED, 1)));
  for (int64_t step = 1; step <= spec.steps(); ++step) {
    ASSERT_OK_AND_ASSIGN(double loss, job->RunStep(step));
    EXPECT_TRUE(std::isnan(loss));  // synthetic has no loss
  }
  EXPECT_EQ(job->hook().steps_finished(), spec.steps());
  EXPECT_EQ(job->communicator().bytes_sent(), 0);  // one rank sends nothing
  EXPECT_GT(job->hook().optimizer().total_state_bytes(), 0);
  ASSERT_OK_AND_ASSIGN(auto gpu, job->DownloadParameters());
  ExpectSame(gpu, cpu[0]);
  // A key in the job's store, scoped by job and epoch.
  EXPECT_OK(
      kv.Get("nccl/nccl-unique-id/gpu-job/3", absl::ZeroDuration()).status());
}

// Mixed precision (JobSpec.precision) through the jobs: GpuJob's bf16
// buckets, device masters and fp32 compute copies against CpuJob's, bf16
// parameters and/or gradients, with gradient accumulation on the device in
// one case; one rank, so the reduction is the identity and both must agree
// bit for bit.
TEST(GpuJobTest, MixedPrecisionJobMatchesTheCpuJob) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  struct Case {
    v1::PrecisionSpec::DType param, reduce;
    int accumulation;
  };
  for (const Case& c : {Case{v1::PrecisionSpec::BF16, v1::PrecisionSpec::FP32, 1},
                        Case{v1::PrecisionSpec::BF16, v1::PrecisionSpec::BF16, 2},
                        Case{v1::PrecisionSpec::FP32, v1::PrecisionSpec::BF16, 1}}) {
    SCOPED_TRACE(absl::StrCat(v1::PrecisionSpec::DType_Name(c.param), "/",
                              v1::PrecisionSpec::DType_Name(c.reduce), " x",
                              c.accumulation));
    const v1::JobSpec spec = SyntheticJob(c.param, c.reduce, c.accumulation);
    InMemoryKvStore cpu_kv, gpu_kv;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuJob> cpu_job,
                         OneRankCpuJob(spec, cpu_kv));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuJob> gpu_job,
                         OneRankGpuJob(spec, "gpu-bf16-job", gpu_kv));
    for (int64_t step = 1; step <= spec.steps(); ++step) {
      ASSERT_OK(cpu_job->RunStep(step).status());
      ASSERT_OK(gpu_job->RunStep(step).status());
    }
    EXPECT_EQ(gpu_job->hook().param_dtype(), cpu_job->hook().param_dtype());
    ASSERT_OK_AND_ASSIGN(auto cpu, cpu_job->DownloadParameters());
    ASSERT_OK_AND_ASSIGN(auto gpu, gpu_job->DownloadParameters());
    ExpectSame(gpu, cpu);
  }
}

// overlap_param_broadcast on the device: the step ends without waiting for
// the broadcasts, and the mlp's forward makes the compute stream wait for
// each layer's (after the owner's step on the communication stream). The
// same kernels in the same order: bit for bit the parameters of the job
// without it, with gradient accumulation too (every micro-batch's forward
// waits). One rank; mlp, whose forward reads the parameters, and the
// adapted host workload, which downloads them.
TEST(GpuJobTest, OverlappedBroadcastsGiveTheSameParameters) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  for (const int accumulation : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("accumulation ", accumulation));
    v1::JobSpec spec = Job(kMlpSgdJob);
    spec.set_gradient_accumulation_steps(accumulation);
    spec = ApplyJobSpecDefaults(spec);
    ASSERT_OK(ValidateJobSpec(spec));
    v1::JobSpec overlapped = spec;
    overlapped.set_overlap_param_broadcast(true);
    InMemoryKvStore kv, overlapped_kv;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuJob> job,
                         OneRankGpuJob(spec, "gpu-plain", kv));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuJob> overlapped_job,
                         OneRankGpuJob(overlapped, "gpu-overlap", overlapped_kv));
    for (int64_t step = 1; step <= spec.steps(); ++step) {
      ASSERT_OK_AND_ASSIGN(double loss, job->RunStep(step));
      ASSERT_OK_AND_ASSIGN(double overlapped_loss,
                           overlapped_job->RunStep(step));
      EXPECT_EQ(overlapped_loss, loss) << "step " << step;
    }
    ASSERT_OK_AND_ASSIGN(auto want, job->DownloadParameters());
    ASSERT_OK_AND_ASSIGN(auto got, overlapped_job->DownloadParameters());
    ExpectSame(got, want);
  }
}

// What a checkpoint keeps of a rank (RankModel, as CheckpointSaver reads
// it): the parameters it owns as its optimizer holds them (bf16: the fp32
// masters) and its optimizer state.
struct RankSnapshot {
  Parameters owned;
  std::vector<ParameterOptimizerState> state;
};

absl::StatusOr<RankSnapshot> Snapshot(StepEngine& engine) {
  RankSnapshot snapshot;
  for (size_t i = 0; i < engine.parameters().size(); ++i) {
    std::vector<float>& values = snapshot.owned.emplace_back(
        engine.parameters()[i].numel);
    RETURN_IF_ERROR(engine.CopyOwnedParameterRangeToHost(
        static_cast<int>(i), 0, values.size(), values.data()));
  }
  ASSIGN_OR_RETURN(snapshot.state, engine.hook().ExportOptimizerState());
  return snapshot;
}

// A resume on the device (ResumeFromCheckpoint's calls, without the files):
// a GpuJob that ran two steps is read as a checkpoint would be, a new
// GpuJob takes those values and that state before its first step, and its
// steps 3 and 4 give the parameters of a CpuJob that never stopped; on the
// way, the state the GPU exports after two steps is the CPU's, bit for bit.
// fp32 and bf16 parameters (the masters come from and go back to the
// device), one rank.
TEST(GpuJobTest, ResumesFromItsOwnStateAsTheCpuJobRunsOn) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  for (const auto param : {v1::PrecisionSpec::FP32, v1::PrecisionSpec::BF16}) {
    SCOPED_TRACE(v1::PrecisionSpec::DType_Name(param));
    const v1::JobSpec spec = SyntheticJob(param, v1::PrecisionSpec::FP32);
    InMemoryKvStore cpu_kv, first_kv, resumed_kv;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuJob> cpu_job,
                         OneRankCpuJob(spec, cpu_kv));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuJob> first,
                         OneRankGpuJob(spec, "gpu-resume", first_kv));
    for (int64_t step = 1; step <= 2; ++step) {
      ASSERT_OK(cpu_job->RunStep(step).status());
      ASSERT_OK(first->RunStep(step).status());
    }
    ASSERT_OK_AND_ASSIGN(const RankSnapshot cpu_saved, Snapshot(*cpu_job));
    ASSERT_OK_AND_ASSIGN(const RankSnapshot gpu_saved, Snapshot(*first));
    ExpectSame(gpu_saved.owned, cpu_saved.owned);
    ExpectSameOptimizerState(gpu_saved.state, cpu_saved.state);
    first.reset();

    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuJob> resumed,
                         OneRankGpuJob(spec, "gpu-resumed", resumed_kv));
    ASSERT_OK(resumed->UploadParameters(gpu_saved.owned));
    ASSERT_OK(resumed->hook().SetInitialOptimizerState(gpu_saved.state));
    for (int64_t step = 3; step <= 4; ++step) {
      ASSERT_OK(cpu_job->RunStep(step).status());
      ASSERT_OK(resumed->RunStep(step).status());
    }
    ASSERT_OK_AND_ASSIGN(auto cpu, cpu_job->DownloadParameters());
    ASSERT_OK_AND_ASSIGN(auto gpu, resumed->DownloadParameters());
    ExpectSame(gpu, cpu);
    // The wrong number of tensors is named, nothing uploaded.
    EXPECT_THAT(resumed->UploadParameters({}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("0 tensors for a model of")));
  }
}

TEST(GpuZeroHookTest, TwoGpusMatchTheCpuHookOnTwoRanks) {
  PSHARD_SKIP_WITHOUT_GPUS(2);
  // Both modes: the mean by ncclAvg (x_i * 1/2 summed: the same bits as the
  // CPU's sum / 2), and the all-reduced sum divided on the owner.
  for (const auto mode : {v1::JobSpec::REDUCE_BROADCAST,
                          v1::JobSpec::ALLREDUCE_BROADCAST}) {
    SCOPED_TRACE(v1::JobSpec::CommMode_Name(mode));
    v1::JobSpec spec = Job(kSyntheticAdamJob);
    spec.set_world_size(2);
    spec.set_comm_mode(mode);
    ASSERT_OK_AND_ASSIGN(auto cpu, RunCpu(spec));
    ASSERT_OK_AND_ASSIGN(auto gpu, RunGpu(spec, /*adapt_host=*/false));
    for (int r = 0; r < 2; ++r) ExpectSame(gpu[r], cpu[r]);
  }
}

// SHARDED: every bucket cut into one range per rank (one range on one
// GPU, still the sharded path: pieces by range, owner kEveryRank), with
// clipping across the ranges.
TEST(GpuZeroHookTest, ShardedMatchesTheCpuHook) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  std::string why;
  const int gpus = CudaDeviceCount(&why);
  for (const int world : {1, 2}) {
    if (world > gpus) continue;
    for (const bool clip : {false, true}) {
      SCOPED_TRACE(absl::StrCat("world ", world, clip ? ", clipped" : ""));
      v1::JobSpec spec = Job(kSyntheticAdamJob);
      spec.set_world_size(world);
      spec.set_assignment_policy(v1::JobSpec::SHARDED);
      if (clip) spec.mutable_optimizer()->set_max_grad_norm(1);
      ASSERT_OK_AND_ASSIGN(auto cpu, RunCpu(spec));
      ASSERT_OK_AND_ASSIGN(auto gpu, RunGpu(spec, /*adapt_host=*/false));
      for (int r = 0; r < world; ++r) {
        if (clip) {
          ExpectClose(gpu[r], cpu[r], 1e-5);
        } else {
          ExpectSame(gpu[r], cpu[r]);
        }
      }
    }
  }
}

// Global gradient-norm clipping on the device (partial-norm, gather and
// clip kernels, the slots all-reduced by NCCL) against the CPU hook: L2 and
// infinity norms, limits that clip every step, on one GPU and on two in both
// modes (several buckets, owned by both ranks).
TEST(GpuZeroHookTest, ClippingMatchesTheCpuHook) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  std::string why;
  const int gpus = CudaDeviceCount(&why);
  for (const int world : {1, 2}) {
    if (world > gpus) continue;
    for (const auto mode : {v1::JobSpec::REDUCE_BROADCAST,
                            v1::JobSpec::ALLREDUCE_BROADCAST}) {
      for (const double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
        SCOPED_TRACE(absl::StrCat("world ", world, " ",
                                  v1::JobSpec::CommMode_Name(mode),
                                  " norm_type ", norm_type));
        v1::JobSpec spec = Job(kSyntheticAdamJob);
        spec.set_world_size(world);
        spec.set_comm_mode(mode);
        // The synthetic gradients' L2 norm is ~80 and their largest |g| ~1.
        spec.mutable_optimizer()->set_max_grad_norm(norm_type == 2 ? 1 : 0.01);
        spec.mutable_optimizer()->set_norm_type(norm_type);
        ASSERT_OK_AND_ASSIGN(auto cpu, RunCpu(spec));
        ASSERT_OK_AND_ASSIGN(auto gpu, RunGpu(spec, /*adapt_host=*/false));
        for (int r = 0; r < world; ++r) ExpectClose(gpu[r], cpu[r], 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace pshard::worker
