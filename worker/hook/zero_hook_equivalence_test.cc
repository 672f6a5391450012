// The hook against the definition of sharded training: N ranks (threads) with
// the optimizer state split across them must end with the same parameters as
// one process that runs the unsharded optimizer on the rank-averaged
// gradients — for every optimizer, comm mode and assignment policy, on the
// fake communicator and on Gloo over loopback, with the CPU's schedule and
// with the GPU's. Also: step 1 re-packs the buckets into the observed order.
#include "worker/hook/zero_hook.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/fake_communicator.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"
#include "worker/hook/clip_reference.h"
#include "shard/assignment.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/workload/workload.h"

namespace pshard::worker {
namespace {

// kGloo uses shared-memory rings between these same-host ranks; kGlooTcp
// keeps every transfer on TCP. kFakeGpuSchedule is kFake with the schedule
// GpuZeroHook uses (whole buckets, each broadcast right after its step), so
// that the GPU's configuration of the algorithm runs here too.
enum class Backend { kFake, kGloo, kGlooTcp, kFakeGpuSchedule };

constexpr int kSteps = 3;

v1::JobSpec MakeSpec(v1::OptimizerSpec::Kind kind, v1::JobSpec::CommMode mode,
                     v1::JobSpec::AssignmentPolicy policy, int world) {
  v1::JobSpec spec;
  spec.set_name("hook-test");
  spec.set_world_size(world);
  spec.set_backend(v1::JobSpec::GLOO);
  spec.mutable_synthetic()->set_num_parameters(1000);
  spec.mutable_synthetic()->set_tensor_numel(130);
  // About 2 tensors per bucket: several buckets of unequal sizes.
  spec.set_bucket_cap_mb(1100.0 / (1024 * 1024));
  spec.set_comm_mode(mode);
  spec.set_assignment_policy(policy);
  spec.set_steps(kSteps);
  spec.set_seed(42);
  v1::OptimizerSpec* opt = spec.mutable_optimizer();
  opt->set_kind(kind);
  auto* hp = opt->mutable_hyper_parameters();
  if (kind == v1::OptimizerSpec::SGD) {
    hp->set_lr(0.1);
    hp->set_momentum(0.9);
    hp->set_nesterov(true);
    hp->set_weight_decay(0.01);
  } else {
    hp->set_lr(0.01);
  }
  // A second parameter group with its own hyper-parameters.
  v1::ParamGroup* group = opt->add_param_groups();
  group->add_params("t1");
  group->add_params("t[45]");
  group->mutable_hyper_parameters()->set_lr(0.003);
  group->mutable_hyper_parameters()->set_weight_decay(0.05);
  return spec;
}

struct RankResult {
  std::vector<std::vector<float>> params_after_step1;
  std::vector<std::vector<float>> params;
  std::vector<int> owners;
  std::vector<int64_t> bucket_steps;
  std::vector<int64_t> bucket_bytes;
  std::vector<int64_t> owned_elements;  // by bucket
  int64_t state_bytes = 0;
  int64_t bytes_sent = 0;
  // Per step: the hook's last_grad_norm (-1 when it had none).
  std::vector<double> grad_norms;
};

std::vector<std::vector<float>> Snapshot(const ZeroHook& hook) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < hook.parameter_infos().size(); ++i) {
    const float* p = hook.params()[i];
    out.emplace_back(p, p + hook.parameter_infos()[i].numel);
  }
  return out;
}

// Runs one rank of the job.
absl::Status RunRank(const v1::JobSpec& spec, Backend backend,
                     Communicator* comm, RankResult* result) {
  const int rank = comm->rank();
  const int world = comm->world_size();
  absl::StatusOr<std::unique_ptr<Workload>> workload =
      CreateWorkload(spec, rank, world);
  if (!workload.ok()) return workload.status();
  auto optimizer = ShardOptimizer::Create(spec.optimizer());
  if (!optimizer.ok()) return optimizer.status();
  ZeroHookOptions options;
  options.comm_mode = spec.comm_mode();
  options.bucket_cap_mb = spec.bucket_cap_mb();
  options.timeout = absl::Seconds(30);
  options.clipping = GradClipping::FromSpec(spec.optimizer());
  // Pieces of 100 floats: buckets of ~260 travel in 3, parameters of 130
  // straddle pieces.
  options.piece_bytes = 400;
  if (backend == Backend::kFakeGpuSchedule) {
    options.piece_bytes = 0;
    options.broadcast_lag = 0;
  }
  auto policy = spec.assignment_policy();
  auto hook = ZeroHook::Create(
      (*workload)->parameters(), comm, *std::move(optimizer),
      [policy, world, comm](const BucketLayout& layout)
          -> absl::StatusOr<BucketAssignment> {
        // The gradients of the first step are held until now: nothing may
        // have been sent yet.
        if (comm->bytes_sent() != 0) {
          return absl::InternalError("communication before the assignment");
        }
        BucketAssignment a;
        a.epoch = 1;
        auto owners = shard::AssignBuckets(policy, layout.BucketBytes(), world);
        if (!owners.ok()) return owners.status();
        a.owners = *owners;
        return a;
      },
      options);
  if (!hook.ok()) return hook.status();
  ZeroHook& h = **hook;
  if (h.state() != HookState::kUninitialized) {
    return absl::InternalError("hook starts initialized");
  }
  if (absl::Status s = (*workload)->InitializeParameters(h.params()); !s.ok()) {
    return s;
  }
  for (int step = 1; step <= spec.steps(); ++step) {
    std::vector<const float*> params(h.params().begin(), h.params().end());
    auto loss = (*workload)->ComputeGradients(step, params, h.grads(), h);
    if (!loss.ok()) return loss.status();
    if (absl::Status s = h.FinishStep(); !s.ok()) return s;
    result->grad_norms.push_back(h.last_grad_norm().value_or(-1));
    if (step == 1) {
      if (h.state() != HookState::kInitialized || h.epoch() != 1) {
        return absl::InternalError("hook not initialized after step 1");
      }
      result->params_after_step1 = Snapshot(h);
    }
  }
  result->params = Snapshot(h);
  result->owners = h.owners();
  result->bucket_bytes = h.layout().BucketBytes();
  for (int b = 0; b < h.layout().num_buckets(); ++b) {
    result->bucket_steps.push_back(h.bucket_steps(b));
    result->owned_elements.push_back(h.owned_elements(b));
  }
  result->state_bytes = h.optimizer().total_state_bytes();
  result->bytes_sent = comm->bytes_sent();
  // Nobody closes its connections while a peer still receives.
  return comm->Barrier()->Wait(absl::Seconds(30));
}

// Runs all ranks as threads.
std::vector<RankResult> RunJob(const v1::JobSpec& spec, Backend backend) {
  const int world = spec.world_size();
  std::vector<RankResult> results(world);
  FakeHub hub(world);
  InMemoryKvStore store;
  std::vector<absl::Status> statuses =
      RunRanks(world, [&](int r) -> absl::Status {
        std::unique_ptr<Communicator> comm;
        if (backend == Backend::kFake ||
            backend == Backend::kFakeGpuSchedule) {
          comm = hub.Create(r);
        } else {
          GlooOptions options;
          options.rank = r;
          options.world_size = world;
          options.timeout = absl::Seconds(30);
          options.shared_memory = backend == Backend::kGloo;
          options.shm_ring_bytes = 4096;  // small: buckets wrap around it
          ASSIGN_OR_RETURN(comm, CreateGlooCommunicator(options, store));
        }
        return RunRank(spec, backend, comm.get(), &results[r]);
      });
  for (int r = 0; r < world; ++r) {
    EXPECT_OK(statuses[r]) << "rank " << r;
  }
  return results;
}

// One process, unsharded: the same optimizer on the rank-averaged gradients,
// clipped as torch.nn.utils.clip_grad_norm_ does when the spec clips (the
// norm of each step into `norms`).
std::vector<std::vector<float>> Reference(const v1::JobSpec& spec, int steps,
                                          int world,
                                          std::vector<double>* norms = nullptr) {
  std::vector<std::unique_ptr<Workload>> workloads;
  for (int r = 0; r < world; ++r) {
    auto w = CreateWorkload(spec, r, world);
    EXPECT_OK(w.status());
    workloads.push_back(*std::move(w));
  }
  const auto& infos = workloads[0]->parameters();
  const int n = static_cast<int>(infos.size());
  std::vector<std::vector<float>> params(n);
  std::vector<float*> param_ptrs;
  for (int i = 0; i < n; ++i) {
    params[i].resize(infos[i].numel);
    param_ptrs.push_back(params[i].data());
  }
  EXPECT_OK(workloads[0]->InitializeParameters(param_ptrs));
  auto optimizer = ShardOptimizer::Create(spec.optimizer());
  EXPECT_OK(optimizer.status());
  for (int i = 0; i < n; ++i) {
    EXPECT_OK((*optimizer)->AddBucket(i, {{infos[i].name, 0, infos[i].numel}}));
  }
  struct NullSink : GradientSink {
    void GradientReady(int) override {}
  } sink;
  for (int step = 1; step <= steps; ++step) {
    std::vector<std::vector<float>> sum(n);
    for (int r = 0; r < world; ++r) {
      std::vector<std::vector<float>> grads(n);
      std::vector<float*> grad_ptrs;
      for (int i = 0; i < n; ++i) {
        grads[i].resize(infos[i].numel);
        grad_ptrs.push_back(grads[i].data());
      }
      std::vector<const float*> cparams(param_ptrs.begin(), param_ptrs.end());
      EXPECT_OK(workloads[r]->ComputeGradients(step, cparams, grad_ptrs, sink)
                    .status());
      for (int i = 0; i < n; ++i) {
        if (r == 0) {
          sum[i] = grads[i];
        } else {
          for (size_t k = 0; k < sum[i].size(); ++k) sum[i][k] += grads[i][k];
        }
      }
    }
    for (int i = 0; i < n; ++i) {
      for (float& g : sum[i]) g /= static_cast<float>(world);
    }
    if (spec.optimizer().has_max_grad_norm()) {
      const double norm_type = spec.optimizer().norm_type();
      const double total = ClipGradNormLikeTorch(
          sum, spec.optimizer().max_grad_norm(), norm_type == 0 ? 2 : norm_type);
      if (norms != nullptr) norms->push_back(total);
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_OK((*optimizer)->Step(i, params[i].data(), sum[i].data()));
    }
  }
  return params;
}

void ExpectClose(const std::vector<std::vector<float>>& actual,
                 const std::vector<std::vector<float>>& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_EQ(actual[i].size(), expected[i].size()) << what;
    for (size_t k = 0; k < actual[i].size(); ++k) {
      const double a = actual[i][k], e = expected[i][k];
      ASSERT_LE(std::abs(a - e), 1e-6 * std::max(1.0, std::abs(e)))
          << what << ": parameter " << i << " element " << k << " is " << a
          << ", expected " << e;
    }
  }
}

class EquivalenceTest
    : public ::testing::TestWithParam<
          std::tuple<Backend, int, v1::OptimizerSpec::Kind,
                     v1::JobSpec::CommMode, v1::JobSpec::AssignmentPolicy>> {};

TEST_P(EquivalenceTest, ShardedEqualsUnsharded) {
  const auto [backend, world, kind, mode, policy] = GetParam();
  v1::JobSpec spec = MakeSpec(kind, mode, policy, world);
  ASSERT_OK(ValidateJobSpec(spec));
  std::vector<RankResult> results = RunJob(spec, backend);
  if (HasFailure()) return;

  // Same parameters as the unsharded reference, after step 1 and at the end.
  const auto after1 = Reference(spec, 1, world);
  const auto final_params = Reference(spec, kSteps, world);
  for (int r = 0; r < world; ++r) {
    ExpectClose(results[r].params_after_step1, after1,
                absl::StrCat("rank ", r, " after step 1"));
    ExpectClose(results[r].params, final_params, absl::StrCat("rank ", r));
    // Broadcast makes every rank bit-identical.
    EXPECT_EQ(results[r].params, results[0].params) << "rank " << r;
  }
  // Step 1 already moved the parameters (no lost iteration).
  auto w = CreateWorkload(spec, 0, world);
  ASSERT_OK(w.status());
  std::vector<std::vector<float>> init(after1.size());
  std::vector<float*> ptrs;
  for (size_t i = 0; i < init.size(); ++i) {
    init[i].resize(after1[i].size());
    ptrs.push_back(init[i].data());
  }
  ASSERT_OK((*w)->InitializeParameters(ptrs));
  EXPECT_NE(results[0].params_after_step1, init);

  // Every element stepped by exactly one rank per step, its owner; each
  // rank's optimizer state is exactly its owned share.
  const auto& owners = results[0].owners;
  const int num_buckets = static_cast<int>(owners.size());
  ASSERT_GT(num_buckets, 2);
  const int64_t state_per_byte =
      kind == v1::OptimizerSpec::SGD ? 1 : 2;  // momentum; exp_avg+exp_avg_sq
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(results[r].owners, owners);
    int64_t owned_bytes = 0;
    for (int b = 0; b < num_buckets; ++b) {
      int64_t expected_owned = owners[b] == r ? results[r].bucket_bytes[b] / 4
                                              : 0;
      if (policy == v1::JobSpec::SHARDED) {
        EXPECT_EQ(owners[b], shard::kEveryRank);
        expected_owned =
            shard::ShardRanges(results[r].bucket_bytes[b] / 4, world)[r].size();
      }
      EXPECT_EQ(results[r].owned_elements[b], expected_owned)
          << "rank " << r << " bucket " << b;
      EXPECT_EQ(results[r].bucket_steps[b], expected_owned > 0 ? kSteps : 0)
          << "rank " << r << " bucket " << b;
      owned_bytes += 4 * expected_owned;
    }
    EXPECT_EQ(results[r].state_bytes, state_per_byte * owned_bytes)
        << "rank " << r;
  }
  // SHARDED, reduce + broadcast: every rank sends the others' ranges once
  // (reduce-scatter) and its own to every peer (all-gather), each step.
  if (policy == v1::JobSpec::SHARDED &&
      mode == v1::JobSpec::REDUCE_BROADCAST) {
    for (int r = 0; r < world; ++r) {
      int64_t per_step = 0;
      for (int b = 0; b < num_buckets; ++b) {
        const int64_t bucket = results[r].bucket_bytes[b];
        const int64_t own = 4 * results[r].owned_elements[b];
        per_step += (bucket - own) + own * (world - 1);
      }
      EXPECT_EQ(results[r].bytes_sent, kSteps * per_step) << "rank " << r;
    }
  }
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kFake:
      return "Fake";
    case Backend::kGloo:
      return "Gloo";
    case Backend::kGlooTcp:
      return "GlooTcp";
    case Backend::kFakeGpuSchedule:
      return "FakeGpuSchedule";
  }
  return "?";
}

std::string KindName(v1::OptimizerSpec::Kind k) {
  return v1::OptimizerSpec::Kind_Name(k);
}

std::string ConfigName(
    const ::testing::TestParamInfo<EquivalenceTest::ParamType>& info) {
  return absl::StrCat(BackendName(std::get<0>(info.param)), "_World",
                      std::get<1>(info.param), "_",
                      KindName(std::get<2>(info.param)), "_",
                      v1::JobSpec::CommMode_Name(std::get<3>(info.param)), "_",
                      v1::JobSpec::AssignmentPolicy_Name(
                          std::get<4>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    AllConfigs, EquivalenceTest,
    ::testing::Combine(
        ::testing::Values(Backend::kFake, Backend::kGloo, Backend::kGlooTcp,
                          Backend::kFakeGpuSchedule),
        ::testing::Values(1, 2, 3),
        ::testing::Values(v1::OptimizerSpec::SGD, v1::OptimizerSpec::ADAM,
                          v1::OptimizerSpec::ADAMW),
        ::testing::Values(v1::JobSpec::ALLREDUCE_BROADCAST,
                          v1::JobSpec::REDUCE_BROADCAST),
        ::testing::Values(v1::JobSpec::ROUND_ROBIN, v1::JobSpec::BALANCED,
                          v1::JobSpec::SHARDED)),
    ConfigName);

// SHARDED at 4 ranks, where the ~260-element buckets' ranges (whole
// 16-element units) are uneven.
INSTANTIATE_TEST_SUITE_P(
    ShardedWorld4, EquivalenceTest,
    ::testing::Combine(
        ::testing::Values(Backend::kFake, Backend::kGlooTcp,
                          Backend::kFakeGpuSchedule),
        ::testing::Values(4),
        ::testing::Values(v1::OptimizerSpec::SGD, v1::OptimizerSpec::ADAM,
                          v1::OptimizerSpec::ADAMW),
        ::testing::Values(v1::JobSpec::ALLREDUCE_BROADCAST,
                          v1::JobSpec::REDUCE_BROADCAST),
        ::testing::Values(v1::JobSpec::SHARDED)),
    ConfigName);

// Global gradient-norm clipping against the unsharded reference clipped as
// torch does: several buckets owned by different ranks, each owner's steps
// deferred to the global norm. kClips sets max_grad_norm to a tenth of the
// first step's norm (every step clips), kNoClip to ten times it (none does).
enum class Clip { kL2Clips, kL2NoClip, kInfClips, kInfNoClip };

class ClippingTest
    : public ::testing::TestWithParam<
          std::tuple<Backend, int, v1::JobSpec::CommMode, Clip>> {};

TEST_P(ClippingTest, ShardedClippedEqualsUnshardedClipped) {
  const auto [backend, world, mode, clip] = GetParam();
  v1::JobSpec spec = MakeSpec(v1::OptimizerSpec::ADAM, mode,
                              v1::JobSpec::ROUND_ROBIN, world);
  const bool inf = clip == Clip::kInfClips || clip == Clip::kInfNoClip;
  const bool clips = clip == Clip::kL2Clips || clip == Clip::kInfClips;
  if (inf) {
    spec.mutable_optimizer()->set_norm_type(
        std::numeric_limits<double>::infinity());
  }
  // The first step's norm, from the reference with a huge limit.
  spec.mutable_optimizer()->set_max_grad_norm(1e30);
  std::vector<double> probe;
  Reference(spec, 1, world, &probe);
  ASSERT_EQ(probe.size(), 1u);
  spec.mutable_optimizer()->set_max_grad_norm(probe[0] * (clips ? 0.1 : 10));
  ASSERT_OK(ValidateJobSpec(spec));

  std::vector<double> norms;
  const auto expected = Reference(spec, kSteps, world, &norms);
  const double limit = spec.optimizer().max_grad_norm();
  for (double norm : norms) EXPECT_EQ(norm > limit, clips) << norm;
  std::vector<RankResult> results = RunJob(spec, backend);
  if (HasFailure()) return;
  for (int r = 0; r < world; ++r) {
    ExpectClose(results[r].params, expected, absl::StrCat("rank ", r));
    EXPECT_EQ(results[r].params, results[0].params) << "rank " << r;
    // Every rank reports the same pre-clip norm, torch's within 1e-6.
    ASSERT_EQ(results[r].grad_norms.size(), norms.size());
    for (size_t s = 0; s < norms.size(); ++s) {
      EXPECT_NEAR(results[r].grad_norms[s], norms[s], 1e-6 * norms[s])
          << "rank " << r << " step " << s + 1;
    }
    EXPECT_EQ(results[r].grad_norms, results[0].grad_norms);
  }
  // Several buckets, owned by more than one rank when world > 1.
  const auto& owners = results[0].owners;
  ASSERT_GT(owners.size(), 2u);
  for (int r = 0; r < world; ++r) {
    EXPECT_NE(std::count(owners.begin(), owners.end(), r), 0) << "rank " << r;
  }
  for (int r = 0; r < world; ++r) {
    for (size_t b = 0; b < owners.size(); ++b) {
      EXPECT_EQ(results[r].bucket_steps[b], owners[b] == r ? kSteps : 0);
    }
  }
}

// Under SHARDED every rank owns a range of every bucket: each element's
// share of the norm is taken once, by its range's owner, and every owner
// scales its ranges; the same as the clipped reference.
TEST(ClippingTest, ShardedRangesClipLikeTheReference) {
  for (const Backend backend : {Backend::kFake, Backend::kGloo}) {
    for (const int world : {2, 3}) {
      for (const bool inf : {false, true}) {
        SCOPED_TRACE(absl::StrCat(BackendName(backend), " world ", world,
                                  inf ? " inf" : " L2"));
        v1::JobSpec spec = MakeSpec(v1::OptimizerSpec::ADAMW,
                                    v1::JobSpec::REDUCE_BROADCAST,
                                    v1::JobSpec::SHARDED, world);
        if (inf) {
          spec.mutable_optimizer()->set_norm_type(
              std::numeric_limits<double>::infinity());
        }
        spec.mutable_optimizer()->set_max_grad_norm(1e30);
        std::vector<double> probe;
        Reference(spec, 1, world, &probe);
        ASSERT_EQ(probe.size(), 1u);
        spec.mutable_optimizer()->set_max_grad_norm(probe[0] * 0.1);
        ASSERT_OK(ValidateJobSpec(spec));
        std::vector<double> norms;
        const auto expected = Reference(spec, kSteps, world, &norms);
        std::vector<RankResult> results = RunJob(spec, backend);
        if (HasFailure()) return;
        for (int r = 0; r < world; ++r) {
          ExpectClose(results[r].params, expected, absl::StrCat("rank ", r));
          ASSERT_EQ(results[r].grad_norms.size(), norms.size());
          for (size_t k = 0; k < norms.size(); ++k) {
            EXPECT_NEAR(results[r].grad_norms[k], norms[k], 1e-6 * norms[k]);
          }
        }
      }
    }
  }
}

// Without clipping nothing is reported.
TEST(ClippingTest, NoNormWithoutClipping) {
  v1::JobSpec spec = MakeSpec(v1::OptimizerSpec::SGD,
                              v1::JobSpec::REDUCE_BROADCAST,
                              v1::JobSpec::BALANCED, 2);
  std::vector<RankResult> results = RunJob(spec, Backend::kFake);
  for (const RankResult& r : results) {
    EXPECT_EQ(r.grad_norms, std::vector<double>(kSteps, -1));
  }
}

const char* ClipName(Clip clip) {
  switch (clip) {
    case Clip::kL2Clips:
      return "L2Clips";
    case Clip::kL2NoClip:
      return "L2NoClip";
    case Clip::kInfClips:
      return "InfClips";
    case Clip::kInfNoClip:
      return "InfNoClip";
  }
  return "?";
}

INSTANTIATE_TEST_SUITE_P(
    AllConfigs, ClippingTest,
    ::testing::Combine(
        ::testing::Values(Backend::kFake, Backend::kGloo,
                          Backend::kFakeGpuSchedule),
        ::testing::Values(1, 2, 3),
        ::testing::Values(v1::JobSpec::ALLREDUCE_BROADCAST,
                          v1::JobSpec::REDUCE_BROADCAST),
        ::testing::Values(Clip::kL2Clips, Clip::kL2NoClip, Clip::kInfClips,
                          Clip::kInfNoClip)),
    [](const auto& info) {
      return absl::StrCat(BackendName(std::get<0>(info.param)), "_World",
                          std::get<1>(info.param), "_",
                          v1::JobSpec::CommMode_Name(std::get<2>(info.param)),
                          "_", ClipName(std::get<3>(info.param)));
    });

// A workload whose gradients become ready in forward order: the hook must
// observe that order in step 1, re-pack the buckets, and still be exact.
class ForwardOrderWorkload : public Workload {
 public:
  explicit ForwardOrderWorkload(std::unique_ptr<Workload> inner)
      : inner_(std::move(inner)) {}
  const std::vector<ParameterInfo>& parameters() const override {
    return inner_->parameters();
  }
  absl::Status InitializeParameters(absl::Span<float* const> p) override {
    return inner_->InitializeParameters(p);
  }
  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> p,
                                          absl::Span<float* const> g,
                                          GradientSink& sink) override {
    struct Null : GradientSink {
      void GradientReady(int) override {}
    } null;
    auto loss = inner_->ComputeGradients(step, p, g, null);
    for (size_t i = 0; i < p.size(); ++i) sink.GradientReady(i);
    return loss;
  }
  int64_t samples_per_step() const override { return 0; }

 private:
  std::unique_ptr<Workload> inner_;
};

TEST(ZeroHookTest, RebuildsLayoutFromObservedOrder) {
  v1::JobSpec spec = MakeSpec(v1::OptimizerSpec::ADAM,
                              v1::JobSpec::REDUCE_BROADCAST,
                              v1::JobSpec::BALANCED, 2);
  FakeHub hub(2);
  std::vector<std::vector<std::vector<float>>> finals(2);
  EXPECT_OK(FirstError(RunRanks(2, [&](int r) -> absl::Status {
    auto comm = hub.Create(r);
    ASSIGN_OR_RETURN(std::unique_ptr<Workload> inner,
                     CreateWorkload(spec, r, 2));
    ForwardOrderWorkload workload(std::move(inner));
    ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer,
                     ShardOptimizer::Create(spec.optimizer()));
    std::vector<int> reported_first_params;
    ZeroHookOptions options;
    options.bucket_cap_mb = spec.bucket_cap_mb();
    ASSIGN_OR_RETURN(
        std::unique_ptr<ZeroHook> hook,
        ZeroHook::Create(
            workload.parameters(), comm.get(), std::move(optimizer),
            [&](const BucketLayout& layout)
                -> absl::StatusOr<BucketAssignment> {
              reported_first_params.push_back(
                  layout.buckets()[0].entries[0].param_index);
              auto owners = shard::AssignBuckets(v1::JobSpec::BALANCED,
                                                 layout.BucketBytes(), 2);
              if (!owners.ok()) return owners.status();
              return BucketAssignment{7, *owners};
            },
            options));
    RETURN_IF_ERROR(workload.InitializeParameters(hook->params()));
    for (int step = 1; step <= kSteps; ++step) {
      std::vector<const float*> p(hook->params().begin(),
                                  hook->params().end());
      RETURN_IF_ERROR(
          workload.ComputeGradients(step, p, hook->grads(), *hook).status());
      RETURN_IF_ERROR(hook->FinishStep());
    }
    // Forward order: bucket 0 now starts with parameter 0.
    EXPECT_EQ(reported_first_params, std::vector<int>{0});
    EXPECT_EQ(hook->epoch(), 7);
    finals[r] = Snapshot(*hook);
    return absl::OkStatus();
  })));
  ExpectClose(finals[0], Reference(spec, kSteps, 2), "rank 0");
  EXPECT_EQ(finals[0], finals[1]);
}

// A model whose forward reads every parameter, in an order of its own
// (not the bucket order, not the registration order), and whose gradients
// depend on the values it read: a stale read changes the result.
class ParameterReadingWorkload : public Workload {
 public:
  ParameterReadingWorkload(int rank, std::vector<int> forward_order)
      : rank_(rank), forward_order_(std::move(forward_order)) {
    for (int i = 0; i < 7; ++i) {
      const int64_t n = 37 + 61 * i;  // odd sizes
      infos_.push_back({absl::StrCat("p", i), {n}, n});
    }
  }
  const std::vector<ParameterInfo>& parameters() const override {
    return infos_;
  }
  absl::Status InitializeParameters(absl::Span<float* const> p) override {
    for (size_t i = 0; i < infos_.size(); ++i) {
      for (int64_t k = 0; k < infos_[i].numel; ++k) {
        p[i][k] = std::sin(0.1f * static_cast<float>(k + 7 * i));
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<double> ComputeGradients(int64_t step,
                                          absl::Span<const float* const> p,
                                          absl::Span<float* const> g,
                                          GradientSink& sink) override {
    // "Forward": each parameter's mean, in forward order.
    std::vector<float> mean(infos_.size());
    for (int i : forward_order_) {
      RETURN_IF_ERROR(sink.WaitForParameter(i));
      float sum = 0;
      for (int64_t k = 0; k < infos_[i].numel; ++k) sum += p[i][k];
      mean[i] = sum / static_cast<float>(infos_[i].numel);
    }
    // "Backward", last registered first.
    for (int i = static_cast<int>(infos_.size()) - 1; i >= 0; --i) {
      for (int64_t k = 0; k < infos_[i].numel; ++k) {
        g[i][k] = p[i][k] - mean[i] +
                  0.01f * std::cos(static_cast<float>(step * 13 + rank_ + k));
      }
      sink.GradientReady(i);
    }
    return 0.0;
  }
  int64_t samples_per_step() const override { return 0; }

 private:
  const int rank_;
  const std::vector<int> forward_order_;
  std::vector<ParameterInfo> infos_;
};

// overlap_param_broadcast: the next forward waits for each parameter's
// update as it reads it; the parameters end bit-identical to the run that
// waits for every broadcast at the end of the step, whatever the forward
// order, on Gloo over TCP, under BALANCED and SHARDED.
constexpr int kOverlapWorld = 3;

TEST(ZeroHookTest, OverlappedBroadcastsGiveTheSameParameters) {
  constexpr int kWorld = kOverlapWorld;
  constexpr int kOverlapSteps = 6;
  const std::vector<std::vector<int>> orders = {
      {0, 1, 2, 3, 4, 5, 6}, {6, 5, 4, 3, 2, 1, 0}, {3, 0, 6, 2, 5, 1, 4}};
  for (v1::JobSpec::AssignmentPolicy policy :
       {v1::JobSpec::BALANCED, v1::JobSpec::SHARDED}) {
    for (const std::vector<int>& order : orders) {
      std::vector<std::vector<std::vector<float>>> finals[2];
      for (bool overlap : {false, true}) {
        SCOPED_TRACE(absl::StrCat(v1::JobSpec::AssignmentPolicy_Name(policy),
                                  " order ", order[0], order[1], order[2],
                                  overlap ? " overlapped" : ""));
        std::vector<std::vector<std::vector<float>>>& out = finals[overlap];
        out.resize(kWorld);
        InMemoryKvStore store;
        EXPECT_OK(FirstError(RunRanks(kWorld, [&](int r) -> absl::Status {
          GlooOptions gloo;
          gloo.rank = r;
          gloo.world_size = kWorld;
          gloo.timeout = absl::Seconds(30);
          gloo.shared_memory = false;
          ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                           CreateGlooCommunicator(gloo, store));
          ParameterReadingWorkload workload(r, order);
          v1::OptimizerSpec opt;
          opt.set_kind(v1::OptimizerSpec::ADAM);
          opt.mutable_hyper_parameters()->set_lr(0.05);
          ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer,
                           ShardOptimizer::Create(opt));
          ZeroHookOptions options;
          options.bucket_cap_mb = 1200.0 / (1 << 20);  // several buckets
          options.piece_bytes = 256;
          options.timeout = absl::Seconds(30);
          options.overlap_param_broadcast = overlap;
          ASSIGN_OR_RETURN(
              std::unique_ptr<ZeroHook> hook,
              ZeroHook::Create(
                  workload.parameters(), comm.get(), std::move(optimizer),
                  [policy](const BucketLayout& layout)
                      -> absl::StatusOr<BucketAssignment> {
                    ASSIGN_OR_RETURN(std::vector<int> owners,
                                     shard::AssignBuckets(
                                         policy, layout.BucketBytes(),
                                         kOverlapWorld));
                    return BucketAssignment{1, owners};
                  },
                  options));
          RETURN_IF_ERROR(workload.InitializeParameters(hook->params()));
          for (int step = 1; step <= kOverlapSteps; ++step) {
            std::vector<const float*> p(hook->params().begin(),
                                        hook->params().end());
            RETURN_IF_ERROR(
                workload.ComputeGradients(step, p, hook->grads(), *hook)
                    .status());
            RETURN_IF_ERROR(hook->FinishStep());
          }
          RETURN_IF_ERROR(hook->WaitForAllParameters());
          out[r] = Snapshot(*hook);
          return comm->Barrier()->Wait(absl::Seconds(30));
        })));
      }
      for (int r = 0; r < kWorld; ++r) {
        EXPECT_EQ(finals[1][r], finals[0][0]) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace pshard::worker
