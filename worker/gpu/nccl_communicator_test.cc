// NcclCommunicator: world size 1 on one GPU, 2 ranks as threads when two GPUs
// are present, the stream-ordered Reduce -> step -> Broadcast of the ZeRO
// hook, failure and abort paths, deadlines. Skips without a GPU; the byte
// convention and the no-GPU errors are checked everywhere.
#include "worker/gpu/nccl_communicator.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"
#include "worker/gpu/gpu_shard_optimizer.h"
#include "worker/gpu/gpu_test_util.h"

#if defined(PSHARD_HAS_CUDA)
#include <cuda_runtime_api.h>

#include "worker/gpu/cuda_util.h"
#include "worker/gpu/kernels.h"
#endif

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

TEST(NcclBytesSentTest, RingConvention) {
  const int64_t mb = 1 << 20;
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kAllReduce, mb, 1), 0);
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kBroadcast, mb, 1), 0);
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kAllReduce, 1000, 2), 1000);
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kReduce, 1000, 2), 500);
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kBroadcast, 1000, 2), 500);
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kAllReduce, 4000, 4), 6000);
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kReduce, 4000, 4), 3000);
  // reduce + broadcast == the DDP volume 2(n-1)/n S; all-reduce + broadcast
  // (the seed) is 3(n-1)/n S.
  const int64_t s = 8 * mb;
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kReduce, s, 8) +
                NcclBytesSent(NcclOpKind::kBroadcast, s, 8),
            2 * s * 7 / 8);
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kAllReduce, s, 8) +
                NcclBytesSent(NcclOpKind::kBroadcast, s, 8),
            3 * s * 7 / 8);
  EXPECT_EQ(NcclBytesSent(NcclOpKind::kAllReduce, 0, 8), 0);
}

TEST(NcclCommunicatorTest, CreationValidatesAndExplainsMissingGpu) {
  InMemoryKvStore kv;
  NcclOptions options;
  options.job_id = "job";
  std::string why;
  if (CudaDeviceCount(&why) == 0) {
    EXPECT_THAT(CreateNcclCommunicator(options, kv),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr(why)));
  }
#if defined(PSHARD_HAS_CUDA)
  // Arguments are checked before anything touches a device.
  options.rank = 2;
  options.world_size = 2;
  EXPECT_THAT(
      CreateNcclCommunicator(options, kv),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2")));
#endif
  if (CudaDeviceCount() == 0) return;
  options.rank = 0;
  options.world_size = 1;
  options.device = 1 << 20;
  EXPECT_THAT(CreateNcclCommunicator(options, kv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not exist")));
}

#if defined(PSHARD_HAS_CUDA)

using gpu::CudaStatus;
using gpu::DeviceBuffer;

DeviceBuffer Upload(const std::vector<float>& host) {
  absl::StatusOr<DeviceBuffer> buf =
      DeviceBuffer::Allocate(host.size() * sizeof(float), "test upload");
  EXPECT_OK(buf.status());
  EXPECT_OK(CudaStatus(
      cudaMemcpy(buf->get(), host.data(), host.size() * sizeof(float),
                 cudaMemcpyHostToDevice),
      "upload"));
  EXPECT_OK(CudaStatus(cudaDeviceSynchronize(), "upload sync"));
  return *std::move(buf);
}

std::vector<float> Download(const DeviceBuffer& buf, int64_t n) {
  std::vector<float> host(n);
  EXPECT_OK(CudaStatus(cudaDeviceSynchronize(), "sync"));
  EXPECT_OK(CudaStatus(cudaMemcpy(host.data(), buf.get(), n * sizeof(float),
                                  cudaMemcpyDeviceToHost),
                       "download"));
  return host;
}

NcclOptions OneRank(const std::string& job) {
  NcclOptions options;
  options.job_id = job;
  options.epoch = 1;
  options.rank = 0;
  options.world_size = 1;
  options.device = 0;
  options.timeout = absl::Seconds(60);
  return options;
}

constexpr absl::Duration kWait = absl::Seconds(60);

class NcclOneGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PSHARD_SKIP_WITHOUT_GPUS(1);
    ASSERT_OK_AND_ASSIGN(
        comm_, CreateNcclCommunicator(OneRank(::testing::UnitTest::GetInstance()
                                                  ->current_test_info()
                                                  ->name()),
                                      kv_));
    ASSERT_OK(CudaStatus(cudaSetDevice(0), "cudaSetDevice"));
  }

  InMemoryKvStore kv_;
  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_F(NcclOneGpuTest, CollectivesOnOneRank) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_EQ(comm_->device(), 0);
  EXPECT_NE(comm_->stream(), nullptr);
  std::vector<float> host(1000);
  for (int i = 0; i < 1000; ++i) host[i] = 0.5f * i;
  DeviceBuffer buf = Upload(host);
  std::shared_ptr<Work> a =
      comm_->AllReduce(buf.get(), 1000, DataType::kFloat32);
  std::shared_ptr<Work> r =
      comm_->Reduce(buf.get(), 1000, DataType::kFloat32, 0);
  std::shared_ptr<Work> b =
      comm_->Broadcast(buf.get(), 500, DataType::kBFloat16, 0);
  std::shared_ptr<Work> barrier = comm_->Barrier();
  EXPECT_OK(barrier->Wait(kWait));
  // Stream order: the barrier finished, so everything before it did.
  EXPECT_TRUE(a->IsCompleted());
  EXPECT_TRUE(r->IsCompleted());
  EXPECT_OK(a->Wait(kWait));
  EXPECT_OK(r->Wait(kWait));
  EXPECT_OK(b->Wait(kWait));
  EXPECT_EQ(Download(buf, 1000), host);  // a sum over one rank is the input
  EXPECT_EQ(comm_->bytes_sent(), 0);
  EXPECT_OK(comm_->health());
}

TEST_F(NcclOneGpuTest, ReduceMeanRunsOnTheDevice) {
  // The mean over one rank is the input, left in place on the device (a
  // host division, Communicator's old default, would have read device memory
  // from the host); stream-ordered after the reduction before it. ncclAvg
  // itself runs with two ranks (NcclTwoGpuTest.TwoRanksInThreads).
  std::vector<float> host(4099);
  for (int i = 0; i < 4099; ++i) host[i] = 0.25f * i - 100.0f;
  DeviceBuffer buf = Upload(host);
  std::shared_ptr<Work> sum =
      comm_->Reduce(buf.get(), 4099, DataType::kFloat32, 0);
  std::shared_ptr<Work> mean =
      comm_->ReduceMean(buf.get(), 4099, DataType::kFloat32, 0);
  EXPECT_OK(mean->Wait(kWait));
  EXPECT_TRUE(sum->IsCompleted());
  EXPECT_EQ(Download(buf, 4099), host);
  EXPECT_EQ(comm_->bytes_sent(), 0);
  EXPECT_OK(comm_->health());
}

TEST_F(NcclOneGpuTest, OnCompletionAndStreamWait) {
  DeviceBuffer buf = Upload(std::vector<float>(64, 1.0f));
  std::shared_ptr<Work> work =
      comm_->AllReduce(buf.get(), 64, DataType::kFloat32);
  absl::Notification called;
  absl::Status seen = absl::UnknownError("not called");
  work->OnCompletion([&](absl::Status s) {
    seen = s;
    called.Notify();
  });
  ASSERT_TRUE(called.WaitForNotificationWithTimeout(kWait));
  EXPECT_OK(seen);
  // Already complete: the callback runs at once, on this thread.
  bool inline_call = false;
  work->OnCompletion([&](absl::Status s) {
    EXPECT_OK(s);
    inline_call = true;
  });
  EXPECT_TRUE(inline_call);

  ASSERT_OK_AND_ASSIGN(gpu::CudaStream other, gpu::CudaStream::Create("other"));
  std::shared_ptr<Work> next =
      comm_->Broadcast(buf.get(), 64, DataType::kFloat32, 0);
  auto* nccl_work = dynamic_cast<NcclWork*>(next.get());
  ASSERT_NE(nccl_work, nullptr);
  EXPECT_OK(nccl_work->StreamWait(other.get()));
  EXPECT_OK(StreamWaitFor(*next, other.get(), kWait));
  EXPECT_OK(CudaStatus(cudaStreamSynchronize(other.get()), "sync"));
  EXPECT_TRUE(next->IsCompleted());
}

// Blocks the communication stream until released, via a host function (which
// makes no CUDA call, as host functions must not).
struct StreamGate {
  absl::Notification open;
  static void Host(void* arg) {
    static_cast<StreamGate*>(arg)->open.WaitForNotificationWithTimeout(
        absl::Seconds(30));
  }
};

TEST_F(NcclOneGpuTest, WaitHasADeadlineAndCallbacksRunLater) {
  StreamGate gate;
  DeviceBuffer buf = Upload(std::vector<float>(16, 2.0f));
  std::shared_ptr<Work> gated = comm_->Enqueue([&]() {
    return CudaStatus(
        cudaLaunchHostFunc(comm_->stream(), &StreamGate::Host, &gate),
        "cudaLaunchHostFunc");
  });
  std::shared_ptr<Work> after =
      comm_->AllReduce(buf.get(), 16, DataType::kFloat32);
  absl::Notification called;
  after->OnCompletion([&](absl::Status s) {
    EXPECT_OK(s);
    called.Notify();
  });
  EXPECT_THAT(after->Wait(absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  EXPECT_FALSE(after->IsCompleted());
  EXPECT_FALSE(called.HasBeenNotified());
  gate.open.Notify();
  EXPECT_OK(gated->Wait(kWait));
  EXPECT_OK(after->Wait(kWait));
  EXPECT_TRUE(called.WaitForNotificationWithTimeout(kWait));
}

// Polling an operation that has not finished (the hook's FinishStep does,
// on the training thread) must leave no cudaErrorNotReady in the thread's
// last-error slot: the next step's kernel launches report that slot.
TEST_F(NcclOneGpuTest, PollingAPendingOperationLeavesNoCudaError) {
  DeviceBuffer buf = Upload(std::vector<float>(16, 3.0f));  // syncs: first
  StreamGate gate;
  std::shared_ptr<Work> gated = comm_->Enqueue([&]() {
    return CudaStatus(
        cudaLaunchHostFunc(comm_->stream(), &StreamGate::Host, &gate),
        "cudaLaunchHostFunc");
  });
  ASSERT_OK(CudaStatus(cudaGetLastError(), "before polling"));
  EXPECT_FALSE(gated->IsCompleted());
  EXPECT_THAT(gated->Wait(absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess)
      << cudaGetErrorName(cudaPeekAtLastError());
  // A kernel launched now (the owner's step) reports its own launch only.
  EXPECT_OK(CudaStatus(
      gpu::LaunchDivide(buf.get(), gpu::kKernelFloat32, 16, 3.0f,
                        comm_->stream()),
      "LaunchDivide after polling"));
  gate.open.Notify();
  EXPECT_OK(gated->Wait(kWait));
  EXPECT_EQ(Download(buf, 16), std::vector<float>(16, 1.0f));
}

TEST_F(NcclOneGpuTest, StepIsStreamOrderedBetweenReduceAndBroadcast) {
  // The ZeRO hook on one rank: reduce the gradient, the owner's step on the
  // communication stream, broadcast the parameters; no host sync between.
  v1::OptimizerSpec spec;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(
          R"({"kind": "ADAMW", "hyperParameters": {"lr": 0.01}})", &spec)
          .ok());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GpuShardOptimizer> gpu_opt,
                       GpuShardOptimizer::Create(spec, 0));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> cpu_opt,
                       ShardOptimizer::Create(spec));
  const int64_t n = 300001;
  const std::vector<ParamSpan> spans = {{"w", 0, 300000}, {"b", 300000, 1}};
  ASSERT_OK(gpu_opt->AddBucket(0, spans));
  ASSERT_OK(cpu_opt->AddBucket(0, spans));
  std::vector<float> params(n), grads(n);
  for (int64_t i = 0; i < n; ++i) {
    params[i] = 1.0f / (1 + i % 97);
    grads[i] = 0.001f * static_cast<float>(i % 13) - 0.006f;
  }
  DeviceBuffer dp = Upload(params), dg = Upload(grads);
  std::vector<std::shared_ptr<Work>> works;
  for (int step = 0; step < 3; ++step) {
    works.push_back(comm_->Reduce(dg.get(), n, DataType::kFloat32, 0));
    works.push_back(comm_->Enqueue([&] {
      return gpu_opt->EnqueueStep(0, dp.as<float>(), dg.as<float>(),
                                  comm_->stream());
    }));
    works.push_back(comm_->Broadcast(dp.get(), n, DataType::kFloat32, 0));
    ASSERT_OK(cpu_opt->Step(0, params.data(), grads.data()));
  }
  EXPECT_OK(works.back()->Wait(kWait));
  for (auto& w : works) EXPECT_OK(w->Wait(kWait));
  EXPECT_EQ(Download(dp, n), params);
}

TEST_F(NcclOneGpuTest, FailingEnqueueFailsLaterOperations) {
  DeviceBuffer buf = Upload(std::vector<float>(8, 1.0f));
  std::shared_ptr<Work> ok = comm_->AllReduce(buf.get(), 8, DataType::kFloat32);
  std::shared_ptr<Work> bad =
      comm_->Enqueue([] { return absl::InternalError("step exploded"); });
  EXPECT_THAT(bad->Wait(kWait), StatusIs(absl::StatusCode::kInternal,
                                         HasSubstr("step exploded")));
  std::shared_ptr<Work> later =
      comm_->Broadcast(buf.get(), 8, DataType::kFloat32, 0);
  EXPECT_TRUE(later->IsCompleted());
  EXPECT_THAT(later->Wait(kWait), StatusIs(absl::StatusCode::kInternal,
                                           HasSubstr("step exploded")));
  EXPECT_THAT(comm_->health(),
              StatusIs(absl::StatusCode::kInternal, ::testing::_));
  // The earlier operation either finished cleanly or reports the failure.
  const absl::Status first = ok->Wait(kWait);
  if (!first.ok()) {
    EXPECT_THAT(std::string(first.message()), HasSubstr("step exploded"));
  }
}

TEST_F(NcclOneGpuTest, AbortFailsPendingAndFutureOperations) {
  StreamGate gate;
  DeviceBuffer buf = Upload(std::vector<float>(8, 1.0f));
  std::shared_ptr<Work> gated = comm_->Enqueue([&]() {
    return CudaStatus(
        cudaLaunchHostFunc(comm_->stream(), &StreamGate::Host, &gate),
        "cudaLaunchHostFunc");
  });
  std::shared_ptr<Work> pending =
      comm_->AllReduce(buf.get(), 8, DataType::kFloat32);
  absl::Notification called;
  pending->OnCompletion([&](absl::Status s) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kCancelled, "job cancelled"));
    called.Notify();
  });
  // Open the gate once the abort is recorded: ncclCommAbort may wait for the
  // stream, which a real NCCL kernel (unlike this host function) would leave
  // on abort. The pending operation cannot finish before the abort either way.
  std::thread opener([&] {
    const absl::Time deadline = absl::Now() + kWait;
    while (comm_->health().ok() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    gate.open.Notify();
  });
  comm_->Abort(absl::CancelledError("job cancelled"));
  opener.join();
  comm_->Abort(absl::InternalError("second abort is ignored"));
  EXPECT_THAT(pending->Wait(kWait),
              StatusIs(absl::StatusCode::kCancelled, "job cancelled"));
  EXPECT_TRUE(called.WaitForNotificationWithTimeout(kWait));
  EXPECT_THAT(comm_->Barrier()->Wait(kWait),
              StatusIs(absl::StatusCode::kCancelled, ::testing::_));
  EXPECT_THAT(comm_->Enqueue([] { return absl::OkStatus(); })->Wait(kWait),
              StatusIs(absl::StatusCode::kCancelled, ::testing::_));
  EXPECT_OK(CudaStatus(cudaStreamSynchronize(comm_->stream()), "drain"));
  comm_.reset();  // destruction after an abort must not hang
}

TEST_F(NcclOneGpuTest, InvalidArgumentsFailTheCommunicator) {
  // The shared CheckCollectiveArgs message, named by the NCCL call.
  std::shared_ptr<Work> w = comm_->AllReduce(nullptr, 16, DataType::kFloat32);
  EXPECT_THAT(w->Wait(kWait),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ncclAllReduce on rank 0: null buffer")));
  // Not only the operation: the communicator is failed (and aborted), so a
  // valid operation after it fails too.
  EXPECT_THAT(comm_->health(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null")));
  DeviceBuffer buf = Upload(std::vector<float>(8, 1.0f));
  EXPECT_THAT(comm_->Reduce(buf.get(), 8, DataType::kFloat32, 0)->Wait(kWait),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null")));
}

TEST_F(NcclOneGpuTest, GroupsRunAsOneOperation) {
  // Two segments of one buffer, each group one ncclGroupStart/End; over one
  // rank every collective leaves its input, and one Work covers the group.
  std::vector<float> host(1000);
  for (int i = 0; i < 1000; ++i) host[i] = 0.5f * i - 3.0f;
  DeviceBuffer buf = Upload(host);
  float* data = static_cast<float*>(buf.get());
  const std::vector<CollectiveSegment> halves = {{data, 384, 0},
                                                 {data + 384, 616, 0}};
  std::vector<std::shared_ptr<Work>> works;
  for (const CollectiveKind kind :
       {CollectiveKind::kReduceMean, CollectiveKind::kBroadcast,
        CollectiveKind::kAllReduce}) {
    works.push_back(comm_->IssueGroup(kind, halves, DataType::kFloat32));
  }
  EXPECT_OK(works.back()->Wait(kWait));
  for (const auto& work : works) EXPECT_TRUE(work->IsCompleted());
  EXPECT_EQ(Download(buf, 1000), host);
  EXPECT_OK(comm_->health());
}

TEST_F(NcclOneGpuTest, AGroupWithABadSegmentFailsTheCommunicator) {
  DeviceBuffer buf = Upload(std::vector<float>(8, 1.0f));
  const std::vector<CollectiveSegment> segments = {
      {buf.get(), 8, 0}, {nullptr, 4, 0}};
  EXPECT_THAT(
      comm_->IssueGroup(CollectiveKind::kReduceMean, segments,
                        DataType::kFloat32)
          ->Wait(kWait),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("ncclReduce on rank 0: null buffer")));
  EXPECT_THAT(comm_->health(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null")));
}

TEST(NcclInitTest, MissingPeersHitTheDeadline) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  // Rank 1 of 2 alone: the unique id never appears.
  {
    InMemoryKvStore kv;
    NcclOptions options = OneRank("lonely");
    options.world_size = 2;
    options.rank = 1;
    options.timeout = absl::Milliseconds(300);
    EXPECT_THAT(CreateNcclCommunicator(options, kv),
                StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  }
  // Rank 0 of 2 alone: publishes the id, then NCCL's initialisation waits
  // for rank 1 until the deadline, and is aborted.
  {
    InMemoryKvStore kv;
    NcclOptions options = OneRank("lonely-root");
    options.world_size = 2;
    options.timeout = absl::Seconds(3);
    const absl::Time start = absl::Now();
    EXPECT_THAT(CreateNcclCommunicator(options, kv),
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         HasSubstr("did not finish")));
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
    EXPECT_OK(
        kv.Get("nccl-unique-id/lonely-root/1", absl::ZeroDuration()).status());
  }
}

TEST(NcclInitTest, MalformedUniqueIdIsDataLoss) {
  PSHARD_SKIP_WITHOUT_GPUS(1);
  InMemoryKvStore kv;
  ASSERT_OK(kv.Put("nccl-unique-id/bad/1", "short"));
  NcclOptions options = OneRank("bad");
  options.world_size = 2;
  options.rank = 1;
  EXPECT_THAT(CreateNcclCommunicator(options, kv),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("5 bytes")));
}

TEST(NcclTwoGpuTest, TwoRanksInThreads) {
  PSHARD_SKIP_WITHOUT_GPUS(2);
  InMemoryKvStore kv;
  const int64_t n = 1 << 20;
  auto rank_main = [&](int rank) -> absl::Status {
    NcclOptions options = OneRank("two");
    options.rank = rank;
    options.world_size = 2;
    options.device = rank;
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
        CreateNcclCommunicator(options, kv);
    if (!comm.ok()) return comm.status();
    if (cudaSetDevice(rank) != cudaSuccess) {
      return absl::InternalError("cudaSetDevice");
    }
    DeviceBuffer sum = Upload(std::vector<float>(n, rank + 1.0f));
    DeviceBuffer red = Upload(std::vector<float>(n, 10.0f * (rank + 1)));
    DeviceBuffer bc = Upload(std::vector<float>(n, rank == 0 ? 7.0f : -1.0f));
    DeviceBuffer mean = Upload(std::vector<float>(n, rank == 0 ? 1.0f : 4.0f));
    std::vector<std::shared_ptr<Work>> works = {
        (*comm)->AllReduce(sum.get(), n, DataType::kFloat32),
        (*comm)->Reduce(red.get(), n, DataType::kFloat32, /*root=*/1),
        (*comm)->Broadcast(bc.get(), n, DataType::kFloat32, /*root=*/0),
        (*comm)->ReduceMean(mean.get(), n, DataType::kFloat32, /*root=*/0),
        (*comm)->Barrier()};
    for (auto& w : works) {
      absl::Status s = w->Wait(kWait);
      if (!s.ok()) return s;
    }
    const std::vector<float> s = Download(sum, n);
    const std::vector<float> b = Download(bc, n);
    if (s[0] != 3.0f || s[n - 1] != 3.0f || b[0] != 7.0f || b[n - 1] != 7.0f) {
      return absl::InternalError(
          absl::StrCat("rank ", rank, ": wrong results ", s[0], " ", b[0]));
    }
    if (rank == 1) {
      const std::vector<float> r = Download(red, n);
      if (r[0] != 30.0f || r[n - 1] != 30.0f) {
        return absl::InternalError("wrong reduce result");
      }
    } else {
      // ncclAvg on the device: (1 + 4) / 2.
      const std::vector<float> m = Download(mean, n);
      if (m[0] != 2.5f || m[n - 1] != 2.5f) {
        return absl::InternalError(
            absl::StrCat("wrong ReduceMean result ", m[0]));
      }
    }
    const int64_t expected = NcclBytesSent(NcclOpKind::kAllReduce, n * 4, 2) +
                             NcclBytesSent(NcclOpKind::kReduce, n * 4, 2) +
                             NcclBytesSent(NcclOpKind::kBroadcast, n * 4, 2) +
                             NcclBytesSent(NcclOpKind::kReduce, n * 4, 2) +
                             NcclBytesSent(NcclOpKind::kAllReduce, 4, 2);
    if ((*comm)->bytes_sent() != expected) {
      return absl::InternalError("bytes_sent");
    }
    return absl::OkStatus();
  };
  for (const absl::Status& s : RunRanks(2, rank_main)) EXPECT_OK(s);
}

// The SHARDED round: a group of reductions with a root per range is a
// reduce-scatter over uneven ranges (ncclAvg: the mean), a group of
// broadcasts with the same roots an all-gather.
TEST(NcclTwoGpuTest, GroupsAreReduceScatterAndAllGather) {
  PSHARD_SKIP_WITHOUT_GPUS(2);
  InMemoryKvStore kv;
  const int64_t n = (int64_t{1} << 20) + 17;
  const int64_t split = 524304;  // range 0 is 17 elements shorter
  auto rank_main = [&](int rank) -> absl::Status {
    NcclOptions options = OneRank("groups");
    options.rank = rank;
    options.world_size = 2;
    options.device = rank;
    ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                     CreateNcclCommunicator(options, kv));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(rank), "cudaSetDevice"));
    // Rank 0 holds 1, rank 1 holds 4: the mean is 2.5.
    DeviceBuffer buf = Upload(std::vector<float>(n, rank == 0 ? 1.0f : 4.0f));
    float* data = static_cast<float*>(buf.get());
    const std::vector<CollectiveSegment> ranges = {{data, split, 0},
                                                   {data + split, n - split, 1}};
    RETURN_IF_ERROR(comm->IssueGroup(CollectiveKind::kReduceMean, ranges,
                                     DataType::kFloat32)
                        ->Wait(kWait));
    const int64_t mine_begin = rank == 0 ? 0 : split;
    const int64_t mine_end = rank == 0 ? split : n;
    std::vector<float> host = Download(buf, n);
    for (int64_t i = mine_begin; i < mine_end; ++i) {
      if (host[i] != 2.5f) {
        return absl::InternalError(absl::StrCat(
            "rank ", rank, ": reduce-scatter element ", i, " is ", host[i]));
      }
    }
    // The owner's "step": its range becomes 10 + rank.
    for (int64_t i = mine_begin; i < mine_end; ++i) host[i] = 10.0f + rank;
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(buf.get(), host.data(), n * sizeof(float),
                   cudaMemcpyHostToDevice),
        "upload the step"));
    RETURN_IF_ERROR(comm->IssueGroup(CollectiveKind::kBroadcast, ranges,
                                     DataType::kFloat32)
                        ->Wait(kWait));
    host = Download(buf, n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = i < split ? 10.0f : 11.0f;
      if (host[i] != want) {
        return absl::InternalError(absl::StrCat(
            "rank ", rank, ": all-gather element ", i, " is ", host[i]));
      }
    }
    return absl::OkStatus();
  };
  for (const absl::Status& s : RunRanks(2, rank_main)) EXPECT_OK(s);
}

TEST(NcclTwoGpuTest, AbortReleasesAPeerWaitingInACollective) {
  PSHARD_SKIP_WITHOUT_GPUS(2);
  InMemoryKvStore kv;
  absl::Notification rank1_waiting;
  absl::Status rank1_status;
  std::unique_ptr<NcclCommunicator> comms[2];
  auto init = [&](int rank) -> absl::Status {
    NcclOptions options = OneRank("abort");
    options.rank = rank;
    options.world_size = 2;
    options.device = rank;
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
        CreateNcclCommunicator(options, kv);
    if (!comm.ok()) return comm.status();
    comms[rank] = *std::move(comm);
    return absl::OkStatus();
  };
  ASSERT_OK(FirstError(RunRanks(2, init)));
  ASSERT_TRUE(comms[0] && comms[1]);
  // Both ranks all-reduce the same size once first: NCCL (2.22 on) connects
  // peers at a communicator's first collective, inside the call, so a lone
  // first one would wait there (until the timeout) instead of on the device.
  auto warm_up = [&](int rank) -> absl::Status {
    if (cudaSetDevice(rank) != cudaSuccess) {
      return absl::InternalError("cudaSetDevice");
    }
    DeviceBuffer warm = Upload(std::vector<float>(1024, 1.0f));
    return comms[rank]->AllReduce(warm.get(), 1024, DataType::kFloat32)->Wait(kWait);
  };
  ASSERT_OK(FirstError(RunRanks(2, warm_up)));
  ASSERT_OK(CudaStatus(cudaSetDevice(1), "cudaSetDevice"));
  DeviceBuffer buf = Upload(std::vector<float>(1024, 1.0f));
  // Rank 1 enters an all-reduce that rank 0 never joins.
  std::shared_ptr<Work> stuck =
      comms[1]->AllReduce(buf.get(), 1024, DataType::kFloat32);
  EXPECT_THAT(stuck->Wait(absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  comms[1]->Abort(absl::UnavailableError("peer 0 lost"));
  EXPECT_THAT(stuck->Wait(kWait),
              StatusIs(absl::StatusCode::kUnavailable, "peer 0 lost"));
  comms[0]->Abort(absl::CancelledError("test over"));
  comms[1].reset();
  comms[0].reset();
}

#endif  // PSHARD_HAS_CUDA

}  // namespace
}  // namespace pshard::worker
