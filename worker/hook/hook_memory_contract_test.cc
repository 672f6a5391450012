// The calls ZeroHook makes on its HookMemory, in order and on which thread
// (the training thread, or the communicator's order): the contract
// GpuZeroHook's device memory relies on, checked here on host memory.
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/communicator.h"
#include "worker/comm/fake_communicator.h"
#include "worker/comm/rank_threads.h"
#include "worker/hook/hook_memory.h"
#include "worker/hook/zero_hook.h"
#include "worker/hook/zero_hook_test_util.h"
#include "worker/optim/shard_optimizer.h"
#include "shard/assignment.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

// A Communicator that records every operation in the order it is issued (on
// the GPU that is the order on the device: one stream) and keeps the Work of
// the latest one.
class IssueRecorder : public Communicator {
 public:
  explicit IssueRecorder(Communicator* inner) : inner_(inner) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::shared_ptr<Work> AllReduce(void* data, int64_t count,
                                  DataType dtype) override {
    return Issued(absl::StrCat("all-reduce ", count),
                  inner_->AllReduce(data, count, dtype));
  }
  std::shared_ptr<Work> Reduce(void* data, int64_t count, DataType dtype,
                               int root) override {
    return Issued(absl::StrCat("reduce ", count),
                  inner_->Reduce(data, count, dtype, root));
  }
  std::shared_ptr<Work> ReduceMean(void* data, int64_t count, DataType dtype,
                                   int root) override {
    return Issued(absl::StrCat("reduce-mean ", count),
                  inner_->ReduceMean(data, count, dtype, root));
  }
  std::shared_ptr<Work> Broadcast(void* data, int64_t count, DataType dtype,
                                  int root) override {
    return Issued(absl::StrCat("broadcast ", count),
                  inner_->Broadcast(data, count, dtype, root));
  }
  std::shared_ptr<Work> Barrier() override {
    return Issued("barrier", inner_->Barrier());
  }
  // A group of one is recorded as its operation; a larger group as one
  // entry, and it reaches the inner communicator as one group.
  std::shared_ptr<Work> IssueGroup(CollectiveKind kind,
                                   absl::Span<const CollectiveSegment> segments,
                                   DataType dtype) override {
    if (segments.size() == 1) {
      return Communicator::IssueGroup(kind, segments, dtype);
    }
    std::string what = absl::StrCat(
        "group of ", segments.size(), " ",
        kind == CollectiveKind::kAllReduce    ? "all-reduce"
        : kind == CollectiveKind::kReduceMean ? "reduce-mean"
                                              : "broadcast");
    for (const CollectiveSegment& segment : segments) {
      absl::StrAppend(&what, " ", segment.count, "@", segment.root);
    }
    return Issued(std::move(what), inner_->IssueGroup(kind, segments, dtype));
  }
  std::shared_ptr<Work> Enqueue(std::function<absl::Status()> fn) override {
    return Issued("enqueue", inner_->Enqueue(std::move(fn)));
  }
  std::shared_ptr<Work> EnqueueTouching(
      std::function<absl::Status()> fn,
      std::vector<MemoryRange> ranges) override {
    std::string what = "enqueue touching";
    for (const MemoryRange& r : ranges) absl::StrAppend(&what, " ", r.bytes);
    return Issued(std::move(what),
                  inner_->EnqueueTouching(std::move(fn), std::move(ranges)));
  }
  void Abort(const absl::Status& reason) override { inner_->Abort(reason); }
  int64_t bytes_sent() const override { return inner_->bytes_sent(); }

  std::vector<std::string> issued() {
    absl::MutexLock lock(&mu_);
    return issued_;
  }
  // Whether `work` is the latest operation's.
  bool IsLast(const Work& work) {
    absl::MutexLock lock(&mu_);
    return last_.get() == &work;
  }

 private:
  std::shared_ptr<Work> Issued(std::string what, std::shared_ptr<Work> work) {
    absl::MutexLock lock(&mu_);
    issued_.push_back(std::move(what));
    last_ = work;
    return work;
  }

  Communicator* const inner_;
  absl::Mutex mu_;
  std::vector<std::string> issued_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Work> last_ ABSL_GUARDED_BY(mu_);
};

// Host memory that records what the hook asks of it: which calls come from
// the training thread, and which run in the communicator's order.
class RecordingMemory : public HookMemory {
 public:
  RecordingMemory(ShardOptimizer* optimizer, IssueRecorder* comm)
      : inner_(NewHostMemory(optimizer)), comm_(comm) {}

  absl::Status Arrange(const BucketLayout& layout) override {
    Log(training_, "arrange");
    return inner_->Arrange(layout);
  }
  DataType param_dtype() const override { return inner_->param_dtype(); }
  DataType grad_dtype() const override { return inner_->grad_dtype(); }
  void* bucket_params(int b) override { return inner_->bucket_params(b); }
  void* bucket_grads(int b) override { return inner_->bucket_grads(b); }
  const std::vector<void*>& param_views() const override {
    return inner_->param_views();
  }
  const std::vector<void*>& grad_views() const override {
    return inner_->grad_views();
  }
  absl::Status WriteFloats(void* dst, DataType dtype, const float* values,
                           int64_t n) override {
    return inner_->WriteFloats(dst, dtype, values, n);
  }
  absl::Status ReadFloats(const void* src, DataType dtype, int64_t n,
                          float* out) override {
    return inner_->ReadFloats(src, dtype, n, out);
  }
  absl::StatusOr<std::shared_ptr<Work>> OrderAfterGradients(int b) override {
    Log(training_, absl::StrCat("order ", b));
    // As the device memory does: an operation in the communicator's order.
    return comm_->Enqueue([this, b] {
      Log(comm_order_, absl::StrCat("ordered ", b));
      return absl::OkStatus();
    });
  }
  absl::Status OwnerStep(int index, void* params, void* grads, int64_t numel,
                         float divisor,
                         const HyperParameterOverrides& overrides) override {
    Log(comm_order_, absl::StrCat("step ", index, " /", divisor));
    return inner_->OwnerStep(index, params, grads, numel, divisor, overrides);
  }
  absl::Status PrepareNorms(int num_pieces, int world_size) override {
    Log(training_, absl::StrCat("prepare norms ", num_pieces, " ", world_size));
    return inner_->PrepareNorms(num_pieces, world_size);
  }
  absl::Status PartialNorm(int index, void* grads, int64_t numel,
                           float divisor, NormKind kind) override {
    Log(comm_order_, absl::StrCat("norm ", index, " /", divisor));
    return inner_->PartialNorm(index, grads, numel, divisor, kind);
  }
  absl::Status GatherNorms(int rank, NormKind kind) override {
    Log(comm_order_, absl::StrCat("gather into ", rank));
    return inner_->GatherNorms(rank, kind);
  }
  float* norm_slots() override { return inner_->norm_slots(); }
  absl::Status ClippedOwnerStep(
      int index, void* params, void* grads, int64_t numel, double max_norm,
      NormKind kind, const HyperParameterOverrides& overrides) override {
    Log(comm_order_, absl::StrCat("clipped step ", index));
    return inner_->ClippedOwnerStep(index, params, grads, numel, max_norm, kind,
                                    overrides);
  }
  absl::StatusOr<double> TotalGradNorm(NormKind kind) override {
    Log(training_, "total norm");
    return inner_->TotalGradNorm(kind);
  }
  absl::Status OrderComputeAfter(Work& last) override {
    // The device memory makes the compute stream wait for `last` alone: it
    // must be the step's last operation.
    Log(training_, comm_->IsLast(last) ? "compute after the last operation"
                                       : "compute after an earlier operation");
    return inner_->OrderComputeAfter(last);
  }
  absl::Status OrderComputeAfterBroadcast(Work& work,
                                          absl::Duration timeout) override {
    Log(training_, "compute after a broadcast");
    return inner_->OrderComputeAfterBroadcast(work, timeout);
  }

  std::vector<std::string> training() {
    absl::MutexLock lock(&mu_);
    return training_;
  }
  std::vector<std::string> comm_order() {
    absl::MutexLock lock(&mu_);
    return comm_order_;
  }

 private:
  void Log(std::vector<std::string>& log, std::string entry) {
    absl::MutexLock lock(&mu_);
    log.push_back(std::move(entry));
  }

  const std::unique_ptr<HookMemory> inner_;
  IssueRecorder* const comm_;
  absl::Mutex mu_;
  std::vector<std::string> training_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> comm_order_ ABSL_GUARDED_BY(mu_);
};

// ZeroHook on a memory of the test's choosing.
class HookOnMemory : public ZeroHook {
 public:
  HookOnMemory(std::vector<ParameterInfo> params, Communicator* comm,
               std::unique_ptr<ShardOptimizer> optimizer,
               std::unique_ptr<HookMemory> memory, AssignmentProvider provider,
               const ZeroHookOptions& options)
      : ZeroHook(std::move(params), comm, std::move(optimizer),
                 std::move(memory), std::move(provider), options) {}
  using ZeroHook::Init;
};

// One rank on a fake communicator, recorded, with GpuZeroHook's schedule
// (whole buckets, each broadcast right after its step): parameters "a" (4)
// and "b" (2), a bucket each, plain SGD with lr 0.5; initialised.
struct RecordedHook {
  static absl::StatusOr<std::unique_ptr<RecordedHook>> Create(
      v1::JobSpec::CommMode mode, const GradClipping& clipping,
      bool overlap_param_broadcast = false) {
    auto recorded = std::make_unique<RecordedHook>();
    ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer, Sgd());
    auto memory = std::make_unique<RecordingMemory>(optimizer.get(),
                                                    &recorded->comm);
    recorded->memory = memory.get();
    ZeroHookOptions options;
    options.comm_mode = mode;
    options.timeout = absl::Seconds(5);
    options.bucket_cap_mb = 8.0 / (1 << 20);  // 8 bytes: a bucket per param
    options.piece_bytes = 0;
    options.broadcast_lag = 0;
    options.clipping = clipping;
    options.overlap_param_broadcast = overlap_param_broadcast;
    recorded->hook = std::make_unique<HookOnMemory>(
        std::vector<ParameterInfo>{{"a", {4}, 4}, {"b", {2}, 2}},
        &recorded->comm, std::move(optimizer), std::move(memory),
        AllToRankZero(), options);
    RETURN_IF_ERROR(recorded->hook->Init());
    return recorded;
  }

  // Parameters a = (1, 1, 1, 1), b = (2, 2); gradients (1, 1, 1, 1) and
  // (-2, -2).
  void Fill() {
    for (int i = 0; i < 4; ++i) hook->params()[0][i] = 1;
    for (int i = 0; i < 2; ++i) hook->params()[1][i] = 2;
    for (int i = 0; i < 4; ++i) hook->grads()[0][i] = 1;
    for (int i = 0; i < 2; ++i) hook->grads()[1][i] = -2;
  }

  FakeHub hub{1};
  std::unique_ptr<Communicator> fake = hub.Create(0);
  IssueRecorder comm{fake.get()};
  RecordingMemory* memory = nullptr;  // the hook's
  std::unique_ptr<HookOnMemory> hook;
};

// The contract GpuZeroHook's device memory relies on, with GpuZeroHook's
// schedule (whole buckets, broadcast right after the step), in both modes:
// the re-pack goes through Arrange; each bucket is ordered after its
// gradients when it launches, before its collectives; the owner's step is
// issued after the bucket's reduction and before its broadcast, and runs in
// the communicator's order; the compute is ordered once per step, after the
// step's last operation.
TEST(ZeroHookTest, HookMemoryCallsFollowTheAlgorithm) {
  for (const auto mode :
       {v1::JobSpec::REDUCE_BROADCAST, v1::JobSpec::ALLREDUCE_BROADCAST}) {
    SCOPED_TRACE(v1::JobSpec::CommMode_Name(mode));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordedHook> recorded_hook,
                         RecordedHook::Create(mode, GradClipping()));
    IssueRecorder& comm = recorded_hook->comm;
    RecordingMemory& recorded = *recorded_hook->memory;
    HookOnMemory& hook = *recorded_hook->hook;
    recorded_hook->Fill();
    // Forward order, unlike DDP's guess: the first step re-packs.
    hook.GradientReady(0);
    hook.GradientReady(1);
    EXPECT_THAT(comm.issued(), ::testing::IsEmpty());  // held until the end
    ASSERT_OK(hook.FinishStep());
    EXPECT_EQ(hook.params()[0][3], 0.5f);  // values survived the re-pack
    EXPECT_EQ(hook.params()[1][1], 3.0f);
    // Step 2: bucket 0 launches as soon as its gradient is announced.
    hook.GradientReady(0);
    EXPECT_EQ(recorded.training().back(), "order 0");
    hook.GradientReady(1);
    ASSERT_OK(hook.FinishStep());
    EXPECT_EQ(hook.params()[0][0], 0.0f);
    EXPECT_EQ(hook.params()[1][0], 4.0f);
    EXPECT_EQ(hook.bucket_steps(0), 2);
    EXPECT_EQ(hook.bucket_steps(1), 2);
    EXPECT_THAT(recorded.training(),
                ::testing::ElementsAre(
                    "arrange", "arrange", "order 0", "order 1",
                    "compute after the last operation", "order 0", "order 1",
                    "compute after the last operation"));
    EXPECT_THAT(recorded.comm_order(),
                ::testing::ElementsAre("ordered 0", "step 0 /1", "ordered 1",
                                       "step 1 /1", "ordered 0", "step 0 /1",
                                       "ordered 1", "step 1 /1"));
    const std::string reduce =
        mode == v1::JobSpec::REDUCE_BROADCAST ? "reduce-mean" : "all-reduce";
    std::vector<std::string> step;
    for (const int numel : {4, 2}) {
      step.push_back("enqueue");
      step.push_back(absl::StrCat(reduce, " ", numel));
      step.push_back(absl::StrCat("enqueue touching ", 4 * numel, " ",
                                  4 * numel));
      step.push_back(absl::StrCat("broadcast ", numel));
    }
    std::vector<std::string> two_steps = step;
    two_steps.insert(two_steps.end(), step.begin(), step.end());
    EXPECT_THAT(comm.issued(), ::testing::ElementsAreArray(two_steps));
  }
}

// overlap_param_broadcast: the step orders the compute after its owner
// steps, not after the broadcasts that follow them, and each parameter's
// broadcast is ordered before the compute once, when the next forward asks
// for that parameter (the device memory makes that a device wait); what
// the forward did not ask for, the next FinishStep orders.
TEST(ZeroHookTest, HookMemoryCallsWithOverlapLeaveTheBroadcastsToTheForward) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<RecordedHook> recorded_hook,
      RecordedHook::Create(v1::JobSpec::REDUCE_BROADCAST, GradClipping(),
                           /*overlap_param_broadcast=*/true));
  RecordingMemory& recorded = *recorded_hook->memory;
  HookOnMemory& hook = *recorded_hook->hook;
  recorded_hook->Fill();
  hook.GradientReady(0);
  hook.GradientReady(1);
  ASSERT_OK(hook.FinishStep());
  EXPECT_THAT(recorded.training(),
              ::testing::ElementsAre("arrange", "arrange", "order 0",
                                     "order 1",
                                     "compute after an earlier operation"));
  // The next forward reads "a" (twice: the second wait is free).
  ASSERT_OK(hook.WaitForParameter(0));
  ASSERT_OK(hook.WaitForParameter(0));
  EXPECT_EQ(hook.params()[0][3], 0.5f);
  EXPECT_EQ(recorded.training().back(), "compute after a broadcast");
  EXPECT_EQ(recorded.training().size(), 6u);
  hook.GradientReady(0);
  hook.GradientReady(1);
  ASSERT_OK(hook.FinishStep());
  // "b" was never asked for: FinishStep orders its broadcast first.
  EXPECT_THAT(recorded.training(),
              ::testing::ElementsAre(
                  "arrange", "arrange", "order 0", "order 1",
                  "compute after an earlier operation",
                  "compute after a broadcast", "order 0", "order 1",
                  "compute after a broadcast",
                  "compute after an earlier operation"));
  ASSERT_OK(hook.WaitForAllParameters());
  EXPECT_EQ(hook.params()[0][0], 0.0f);
  EXPECT_EQ(hook.params()[1][0], 4.0f);
}

// With clipping, the same schedule defers the owners' steps: each bucket's
// partial norm runs right after its reduction (in the communicator's order),
// and FinishStep issues the gather, one all-reduce of world_size floats, the
// clipped steps, then the broadcasts; the compute is still
// ordered after the step's last operation. Gradients (1,1,1,1) and (-2,-2):
// norm sqrt(12), clipped to 1.
TEST(ZeroHookTest, HookMemoryCallsWithClippingDeferTheSteps) {
  for (const auto mode :
       {v1::JobSpec::REDUCE_BROADCAST, v1::JobSpec::ALLREDUCE_BROADCAST}) {
    SCOPED_TRACE(v1::JobSpec::CommMode_Name(mode));
    GradClipping clipping;
    clipping.max_norm = 1;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordedHook> recorded_hook,
                         RecordedHook::Create(mode, clipping));
    IssueRecorder& comm = recorded_hook->comm;
    RecordingMemory& recorded = *recorded_hook->memory;
    HookOnMemory& hook = *recorded_hook->hook;
    EXPECT_EQ(hook.last_grad_norm(), std::nullopt);
    for (int step = 1; step <= 2; ++step) {
      recorded_hook->Fill();
      hook.GradientReady(0);
      hook.GradientReady(1);
      ASSERT_OK(hook.FinishStep());
      const double norm = std::sqrt(12.0);
      ASSERT_TRUE(hook.last_grad_norm().has_value());
      EXPECT_NEAR(*hook.last_grad_norm(), norm, 1e-6);
      const float coef = static_cast<float>(1 / (norm + 1e-6));
      // SGD lr 0.5 on the clipped gradients.
      EXPECT_FLOAT_EQ(hook.params()[0][0], 1 - 0.5f * coef);
      EXPECT_FLOAT_EQ(hook.params()[1][1], 2 + 0.5f * 2 * coef);
    }
    EXPECT_THAT(recorded.training(),
                ::testing::ElementsAre(
                    "arrange", "arrange", "prepare norms 2 1", "order 0",
                    "order 1", "compute after the last operation",
                    "total norm", "order 0", "order 1",
                    "compute after the last operation", "total norm"));
    std::vector<std::string> comm_step = {
        "ordered 0", "norm 0 /1",     "ordered 1", "norm 1 /1",
        "gather into 0", "clipped step 0", "clipped step 1"};
    std::vector<std::string> two = comm_step;
    two.insert(two.end(), comm_step.begin(), comm_step.end());
    EXPECT_THAT(recorded.comm_order(), ::testing::ElementsAreArray(two));
    const std::string reduce =
        mode == v1::JobSpec::REDUCE_BROADCAST ? "reduce-mean" : "all-reduce";
    std::vector<std::string> step = {
        "enqueue", absl::StrCat(reduce, " 4"), "enqueue touching 16",
        "enqueue", absl::StrCat(reduce, " 2"), "enqueue touching 8",
        "enqueue",  // the gather
        "all-reduce 1",
        "enqueue touching 16 16 4", "enqueue touching 8 8 4",
        "broadcast 4", "broadcast 2"};
    std::vector<std::string> two_steps = step;
    two_steps.insert(two_steps.end(), step.begin(), step.end());
    EXPECT_THAT(comm.issued(), ::testing::ElementsAreArray(two_steps));
  }
}

// Under SHARDED a round of pieces (a piece of every rank's range) goes out
// as one group: the reductions as a reduce-scatter, then this rank's step of
// its range, then the broadcasts as an all-gather (what NCCL launches once
// per round instead of once per rank). Two ranks, one bucket of 64
// elements, whole ranges (32 each), every broadcast right after its round.
TEST(ZeroHookTest, ShardedRoundsAreIssuedAsGroups) {
  for (const auto mode :
       {v1::JobSpec::REDUCE_BROADCAST, v1::JobSpec::ALLREDUCE_BROADCAST}) {
    SCOPED_TRACE(v1::JobSpec::CommMode_Name(mode));
    FakeHub hub(2);
    std::vector<std::unique_ptr<Communicator>> fakes;
    std::vector<std::unique_ptr<IssueRecorder>> recorders;
    for (int r = 0; r < 2; ++r) {
      fakes.push_back(hub.Create(r));
      recorders.push_back(std::make_unique<IssueRecorder>(fakes.back().get()));
    }
    std::vector<std::vector<float>> params(2);
    std::vector<absl::Status> statuses =
        RunRanks(2, [&](int r) -> absl::Status {
          ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer, Sgd());
          ZeroHookOptions options;
          options.comm_mode = mode;
          options.timeout = absl::Seconds(5);
          options.piece_bytes = 0;
          options.broadcast_lag = 0;
          ASSIGN_OR_RETURN(
              std::unique_ptr<ZeroHook> hook,
              ZeroHook::Create(
                  {{"a", {64}, 64}}, recorders[r].get(), std::move(optimizer),
                  [](const BucketLayout& layout)
                      -> absl::StatusOr<BucketAssignment> {
                    return BucketAssignment{
                        1, std::vector<int>(layout.num_buckets(),
                                            shard::kEveryRank)};
                  },
                  options));
          for (int i = 0; i < 64; ++i) hook->params()[0][i] = 1;
          for (int step = 0; step < 2; ++step) {
            // Rank r's gradient is r + 1: the mean is 1.5.
            for (int i = 0; i < 64; ++i) hook->grads()[0][i] = r + 1.0f;
            hook->GradientReady(0);
            RETURN_IF_ERROR(hook->FinishStep());
          }
          params[r].assign(hook->params()[0], hook->params()[0] + 64);
          return absl::OkStatus();
        });
    for (int r = 0; r < 2; ++r) ASSERT_OK(statuses[r]) << "rank " << r;
    // SGD lr 0.5 on the mean gradient 1.5, twice, on both halves.
    EXPECT_THAT(params[0], ::testing::Each(1 - 2 * 0.75f));
    EXPECT_EQ(params[1], params[0]);
    const std::string reduce = mode == v1::JobSpec::REDUCE_BROADCAST
                                   ? "group of 2 reduce-mean 32@0 32@1"
                                   : "group of 2 all-reduce 32@0 32@1";
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      EXPECT_THAT(recorders[r]->issued(),
                  ::testing::ElementsAre(
                      reduce, "enqueue touching 128 128",
                      "group of 2 broadcast 32@0 32@1", reduce,
                      "enqueue touching 128 128",
                      "group of 2 broadcast 32@0 32@1"));
    }
  }
}

}  // namespace
}  // namespace pshard::worker
