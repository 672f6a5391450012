// Tests of every host Communicator backend (Gloo over loopback with an
// in-memory rendezvous store, and the fake), in the style of Gloo's own
// allreduce_test.cc: N ranks as threads, parameterised over world size and
// buffer size, checked against closed-form expected values.
#include <sys/resource.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/open_files.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/comm/communicator.h"
#include "worker/comm/fake_communicator.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"
#include "worker/comm/tcp_link.h"
#include "worker/comm/reduce_ops.h"

namespace pshard::worker {
namespace {

// kGloo: shared-memory rings between these same-host ranks for reduce and
// broadcast, TCP for the rest; kGlooTcp: TCP only.
enum class Backend { kGloo, kGlooTcp, kFake };

std::string BackendName(Backend b) {
  switch (b) {
    case Backend::kGloo:
      return "Gloo";
    case Backend::kGlooTcp:
      return "GlooTcp";
    case Backend::kFake:
      return "Fake";
  }
  return "";
}

// Creates `n` communicators (concurrently: Gloo's rendezvous needs every rank)
// and runs `body(comm)` on one thread per rank.
class Ranks {
 public:
  Ranks(Backend backend, int n, absl::Duration timeout = absl::Seconds(20))
      : hub_(n, timeout) {
    if (backend == Backend::kFake) {
      for (int r = 0; r < n; ++r) comms_.push_back(hub_.Create(r));
      return;
    }
    GlooOptions options;
    options.timeout = timeout;
    options.key_prefix = "test/";
    options.shared_memory = backend == Backend::kGloo;
    // Small rings, so that buckets wrap around them.
    options.shm_ring_bytes = 64 * 1024;
    absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> comms =
        CreateGlooRanks(n, options, store_);
    EXPECT_OK(comms.status());
    if (comms.ok()) comms_ = *std::move(comms);
  }

  // Runs `body` on every rank at once; a rank's error fails the test, named
  // with its rank.
  void Run(const std::function<absl::Status(Communicator&)>& body) {
    if (comms_.empty()) {
      ADD_FAILURE() << "no communicators to run on";
      return;
    }
    std::vector<absl::Status> statuses =
        RunRanks(static_cast<int>(comms_.size()),
                 [&](int r) { return body(*comms_[r]); });
    for (size_t r = 0; r < statuses.size(); ++r) {
      EXPECT_OK(statuses[r]) << "rank " << r;
    }
  }

  Communicator& comm(int r) { return *comms_[r]; }
  void Reset(int r) { comms_[r].reset(); }

 private:
  InMemoryKvStore store_;
  FakeHub hub_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

constexpr absl::Duration kWait = absl::Seconds(30);

class CollectiveTest
    : public ::testing::TestWithParam<std::tuple<Backend, int, int64_t>> {
 protected:
  Backend backend() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
  int64_t count() const { return std::get<2>(GetParam()); }
};

// OK if element `i` on `rank` is `want`; the first wrong element ends the
// rank's body (returned, not ASSERTed: the body runs on the rank's thread).
absl::Status Expect(float got, float want, int rank, int64_t i,
                    absl::string_view what = "") {
  if (got == want) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " element ", i, " on rank ",
                                          rank, " is ", got, ", want ", want));
}

// Rank r's input element i is r * count + i; sums have closed forms.
float Input(int rank, int64_t count, int64_t i) {
  return static_cast<float>(rank * count + i);
}
float SumOverRanks(int n, int64_t count, int64_t i) {
  return static_cast<float>(count * n * (n - 1) / 2 + n * i);
}

TEST_P(CollectiveTest, AllReduceSums) {
  Ranks ranks(backend(), world());
  const int64_t n = count();
  ranks.Run([&](Communicator& comm) -> absl::Status {
    std::vector<float> data(n);
    for (int64_t i = 0; i < n; ++i) data[i] = Input(comm.rank(), n, i);
    // Two in a row, to exercise slots and reuse.
    RETURN_IF_ERROR(
        comm.AllReduce(data.data(), n, DataType::kFloat32)->Wait(kWait));
    for (int64_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(
          Expect(data[i], SumOverRanks(world(), n, i), comm.rank(), i));
    }
    RETURN_IF_ERROR(
        comm.AllReduce(data.data(), n, DataType::kFloat32)->Wait(kWait));
    for (int64_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(Expect(data[i], world() * SumOverRanks(world(), n, i),
                             comm.rank(), i, "second"));
    }
    return absl::OkStatus();
  });
}

TEST_P(CollectiveTest, ReduceToEveryRoot) {
  Ranks ranks(backend(), world());
  const int64_t n = count();
  ranks.Run([&](Communicator& comm) -> absl::Status {
    for (int root = 0; root < comm.world_size(); ++root) {
      std::vector<float> data(n);
      for (int64_t i = 0; i < n; ++i) data[i] = Input(comm.rank(), n, i);
      RETURN_IF_ERROR(
          comm.Reduce(data.data(), n, DataType::kFloat32, root)->Wait(kWait));
      if (comm.rank() == root) {
        for (int64_t i = 0; i < n; ++i) {
          RETURN_IF_ERROR(
              Expect(data[i], SumOverRanks(world(), n, i), comm.rank(), i));
        }
      }
    }
    return absl::OkStatus();
  });
}

TEST_P(CollectiveTest, BroadcastFromEveryRoot) {
  Ranks ranks(backend(), world());
  const int64_t n = count();
  ranks.Run([&](Communicator& comm) -> absl::Status {
    for (int root = 0; root < comm.world_size(); ++root) {
      std::vector<float> data(n, -1.0f);
      if (comm.rank() == root) {
        for (int64_t i = 0; i < n; ++i) data[i] = Input(root, n, i);
      }
      RETURN_IF_ERROR(comm.Broadcast(data.data(), n, DataType::kFloat32, root)
                          ->Wait(kWait));
      for (int64_t i = 0; i < n; ++i) {
        RETURN_IF_ERROR(Expect(data[i], Input(root, n, i), comm.rank(), i,
                               absl::StrCat("root ", root)));
      }
    }
    return absl::OkStatus();
  });
}

// A group with a root per range (the SHARDED policy's round): reduce-mean
// of range r to rank r is a reduce-scatter over uneven ranges, broadcast of
// range r from rank r an all-gather; a group of all-reduces sums every
// range on every rank.
TEST_P(CollectiveTest, GroupsAreReduceScatterAndAllGather) {
  Ranks ranks(backend(), world());
  const int64_t n = count();
  ranks.Run([&](Communicator& comm) -> absl::Status {
    const int w = comm.world_size();
    std::vector<float> data(n);
    for (int64_t i = 0; i < n; ++i) data[i] = Input(comm.rank(), n, i);
    std::vector<float> summed = data;
    // Uneven, some empty where n < w: range r is [r*n/w, (r+1)*n/w).
    auto begin = [&](int r) { return r * n / w; };
    std::vector<CollectiveSegment> ranges;
    std::vector<CollectiveSegment> summed_ranges;
    for (int r = 0; r < w; ++r) {
      const int64_t size = begin(r + 1) - begin(r);
      ranges.push_back({data.data() + begin(r), size, r});
      summed_ranges.push_back({summed.data() + begin(r), size, 0});
    }
    RETURN_IF_ERROR(
        comm.IssueGroup(CollectiveKind::kReduceMean, ranges, DataType::kFloat32)
            ->Wait(kWait));
    const int me = comm.rank();
    for (int64_t i = begin(me); i < begin(me + 1); ++i) {
      RETURN_IF_ERROR(Expect(data[i],
                             SumOverRanks(w, n, i) / static_cast<float>(w), me,
                             i, "reduce-scatter"));
      data[i] = Input(me, n, i);  // what the owner's step would write
    }
    RETURN_IF_ERROR(
        comm.IssueGroup(CollectiveKind::kBroadcast, ranges, DataType::kFloat32)
            ->Wait(kWait));
    for (int r = 0; r < w; ++r) {
      for (int64_t i = begin(r); i < begin(r + 1); ++i) {
        RETURN_IF_ERROR(
            Expect(data[i], Input(r, n, i), me, i, "all-gather"));
      }
    }
    RETURN_IF_ERROR(comm.IssueGroup(CollectiveKind::kAllReduce, summed_ranges,
                                    DataType::kFloat32)
                        ->Wait(kWait));
    for (int64_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(
          Expect(summed[i], SumOverRanks(w, n, i), me, i, "all-reduce"));
    }
    return absl::OkStatus();
  });
}

// The hook's pattern, many buckets in flight: reduce to owner, owner's
// Enqueue'd step, broadcast from owner; nothing waited until the end.
TEST_P(CollectiveTest, PipelinedReduceStepBroadcast) {
  Ranks ranks(backend(), world());
  const int64_t n = count();
  const int kBuckets = 6;
  ranks.Run([&](Communicator& comm) -> absl::Status {
    std::vector<std::vector<float>> grads(kBuckets, std::vector<float>(n));
    std::vector<std::vector<float>> params(kBuckets, std::vector<float>(n, 0));
    std::vector<std::shared_ptr<Work>> works;
    for (int b = 0; b < kBuckets; ++b) {
      const int owner = b % comm.world_size();
      for (int64_t i = 0; i < n; ++i) grads[b][i] = Input(comm.rank(), n, i) + b;
      works.push_back(comm.Reduce(grads[b].data(), n, DataType::kFloat32, owner));
      if (comm.rank() == owner) {
        float* g = grads[b].data();
        float* p = params[b].data();
        auto step = [g, p, n] {
          for (int64_t i = 0; i < n; ++i) p[i] = 2 * g[i];
          return absl::OkStatus();
        };
        if (b % 2 == 0) {
          works.push_back(comm.Enqueue(step));
        } else {
          works.push_back(comm.EnqueueTouching(
              step, {{g, n * 4}, {p, n * 4}}));
        }
      }
      works.push_back(
          comm.Broadcast(params[b].data(), n, DataType::kFloat32, owner));
    }
    for (auto& w : works) RETURN_IF_ERROR(w->Wait(kWait));
    for (int b = 0; b < kBuckets; ++b) {
      for (int64_t i = 0; i < n; ++i) {
        RETURN_IF_ERROR(Expect(params[b][i],
                               2 * (SumOverRanks(world(), n, i) + world() * b),
                               comm.rank(), i, absl::StrCat("bucket ", b)));
      }
    }
    return absl::OkStatus();
  });
}

TEST_P(CollectiveTest, BytesSentMatchMinimumVolume) {
  Ranks ranks(backend(), world());
  const int64_t n = count();
  std::vector<int64_t> sent(world());
  ranks.Run([&](Communicator& comm) -> absl::Status {
    std::vector<float> data(n, 1.0f);
    // Every rank owns one bucket: reduce to it, broadcast from it.
    for (int root = 0; root < comm.world_size(); ++root) {
      RETURN_IF_ERROR(
          comm.Reduce(data.data(), n, DataType::kFloat32, root)->Wait(kWait));
      RETURN_IF_ERROR(
          comm.Broadcast(data.data(), n, DataType::kFloat32, root)->Wait(kWait));
    }
    sent[comm.rank()] = comm.bytes_sent();
    return absl::OkStatus();
  });
  // Each rank sends its gradient to every other owner once and its own
  // bucket to every peer once: 2(n-1) buckets of 4*count bytes.
  for (int r = 0; r < world(); ++r) {
    EXPECT_EQ(sent[r], 2 * (world() - 1) * 4 * n) << "rank " << r;
  }
}

TEST_P(CollectiveTest, BarrierAndEnqueueOrder) {
  Ranks ranks(backend(), world());
  std::atomic<int> before{0};
  ranks.Run([&](Communicator& comm) -> absl::Status {
    std::vector<int> order;
    auto w1 = comm.Enqueue([&] {
      order.push_back(1);
      ++before;
      return absl::OkStatus();
    });
    auto barrier = comm.Barrier();
    auto w2 = comm.Enqueue([&] {
      order.push_back(2);
      // Every rank ran its first function before anyone passes the barrier.
      return before.load() == comm.world_size()
                 ? absl::OkStatus()
                 : absl::InternalError("barrier did not wait");
    });
    RETURN_IF_ERROR(w2->Wait(kWait));
    RETURN_IF_ERROR(barrier->Wait(kWait));
    RETURN_IF_ERROR(w1->Wait(kWait));
    EXPECT_EQ(order, (std::vector<int>{1, 2}));
    return absl::OkStatus();
  });
}

INSTANTIATE_TEST_SUITE_P(
    AllBackends, CollectiveTest,
    ::testing::Combine(::testing::Values(Backend::kGloo, Backend::kGlooTcp,
                                         Backend::kFake),
                       ::testing::Values(1, 2, 3, 4),
                       ::testing::Values(int64_t{0}, int64_t{1}, int64_t{5},
                                         int64_t{1000}, int64_t{1} << 17)),
    [](const auto& info) {
      return absl::StrCat(BackendName(std::get<0>(info.param)), "_World",
                          std::get<1>(info.param), "_Count",
                          std::get<2>(info.param));
    });

class BackendTest : public ::testing::TestWithParam<Backend> {};

// Two all-reduces larger than a shared-memory ring (64 KiB here): rank 0
// issues both before it waits, rank 1 waits for the first before it issues
// the second. Both must finish. (When a rank's completion thread moved on
// to the second all-reduce's first round while the first's second round
// was in flight, and the other rank, which had not issued the second yet,
// waited for the first's second round, each waited for a send into a ring
// only the other could drain.)
TEST_P(BackendTest, AllReducesWaitedForInDifferentOrdersFinish) {
  Ranks ranks(GetParam(), 2);
  constexpr int64_t kCount = int64_t{1} << 17;  // 512 KiB, chunks of 256 KiB
  ranks.Run([&](Communicator& comm) -> absl::Status {
    std::vector<float> a(kCount, comm.rank() + 1.0f);
    std::vector<float> b(kCount, 10.0f * (comm.rank() + 1));
    std::shared_ptr<Work> first =
        comm.AllReduce(a.data(), kCount, DataType::kFloat32);
    if (comm.rank() == 1) RETURN_IF_ERROR(first->Wait(kWait));
    std::shared_ptr<Work> second =
        comm.AllReduce(b.data(), kCount, DataType::kFloat32);
    RETURN_IF_ERROR(first->Wait(kWait));
    RETURN_IF_ERROR(second->Wait(kWait));
    for (int64_t i : {int64_t{0}, kCount - 1}) {
      RETURN_IF_ERROR(Expect(a[i], 3.0f, comm.rank(), i, "first"));
      RETURN_IF_ERROR(Expect(b[i], 30.0f, comm.rank(), i, "second"));
    }
    return absl::OkStatus();
  });
}

TEST_P(BackendTest, BFloat16AllReduce) {
  Ranks ranks(GetParam(), 3);
  ranks.Run([&](Communicator& comm) -> absl::Status {
    std::vector<uint16_t> data(10);
    for (int i = 0; i < 10; ++i) {
      data[i] = FloatToBFloat16(static_cast<float>(comm.rank() + i));
    }
    RETURN_IF_ERROR(
        comm.AllReduce(data.data(), 10, DataType::kBFloat16)->Wait(kWait));
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(BFloat16ToFloat(data[i]), static_cast<float>(3 + 3 * i));
    }
    return absl::OkStatus();
  });
}

TEST_P(BackendTest, FailingEnqueueFailsLaterOperations) {
  Ranks ranks(GetParam(), 1);
  Communicator& comm = ranks.comm(0);
  auto bad = comm.Enqueue([] { return absl::DataLossError("nan in bucket 3"); });
  float x = 1;
  auto later = comm.AllReduce(&x, 1, DataType::kFloat32);
  EXPECT_THAT(bad->Wait(kWait), StatusIs(absl::StatusCode::kDataLoss, "nan in bucket 3"));
  EXPECT_THAT(later->Wait(kWait), StatusIs(absl::StatusCode::kDataLoss, "nan in bucket 3"));
}

TEST_P(BackendTest, InvalidRootIsRejected) {
  Ranks ranks(GetParam(), 1);
  float x = 0;
  EXPECT_THAT(ranks.comm(0).Reduce(&x, 1, DataType::kFloat32, 3)->Wait(kWait),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("root rank 3")));
}

TEST_P(BackendTest, NegativeCountAndNullBufferAreRejected) {
  Ranks ranks(GetParam(), 1);
  float x = 0;
  EXPECT_THAT(ranks.comm(0).AllReduce(&x, -1, DataType::kFloat32)->Wait(kWait),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("negative element count -1")));
  EXPECT_THAT(
      ranks.comm(0).Broadcast(nullptr, 4, DataType::kFloat32, 0)->Wait(kWait),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::HasSubstr("null buffer")));
  // A rejected call leaves the communicator usable.
  EXPECT_OK(ranks.comm(0).AllReduce(&x, 1, DataType::kFloat32)->Wait(kWait));
}

// A peer that never joins: Abort() releases the blocked rank at once, with
// the abort reason, long before the collective timeout.
TEST_P(BackendTest, AbortReleasesBlockedCollective) {
  Ranks ranks(GetParam(), 2, absl::Seconds(60));
  std::vector<float> data(1000, 1.0f);
  auto work = ranks.comm(0).Reduce(data.data(), 1000, DataType::kFloat32, 0);
  auto later = ranks.comm(0).Broadcast(data.data(), 1000, DataType::kFloat32, 0);
  EXPECT_THAT(work->Wait(absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  absl::Time start = absl::Now();
  ranks.comm(0).Abort(absl::AbortedError("job job-7 cancelled"));
  EXPECT_THAT(work->Wait(absl::Seconds(10)),
              StatusIs(absl::StatusCode::kAborted, "job job-7 cancelled"));
  EXPECT_THAT(later->Wait(absl::Seconds(10)),
              StatusIs(absl::StatusCode::kAborted, "job job-7 cancelled"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Operations issued after the abort fail too.
  EXPECT_THAT(ranks.comm(0).Barrier()->Wait(absl::Seconds(10)),
              StatusIs(absl::StatusCode::kAborted, ::testing::_));
}

// A peer that stops answering: the operation fails after the timeout.
TEST_P(BackendTest, SilentPeerTimesOut) {
  Ranks ranks(GetParam(), 2, absl::Milliseconds(500));
  float x = 1;
  auto work = ranks.comm(1).AllReduce(&x, 1, DataType::kFloat32);
  EXPECT_THAT(work->Wait(absl::Seconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

// A peer that goes away (its process dies): the survivor fails, not hangs.
TEST_P(BackendTest, DeadPeerFailsSurvivor) {
  Ranks ranks(GetParam(), 2, absl::Seconds(60));
  std::vector<float> data(100000, 1.0f);
  auto work = ranks.comm(0).Reduce(data.data(), 100000, DataType::kFloat32, 0);
  if (GetParam() == Backend::kFake) {
    ranks.comm(1).Abort(absl::UnavailableError("peer died"));
  } else {
    ranks.Reset(1);  // closes its sockets
  }
  EXPECT_FALSE(work->Wait(absl::Seconds(20)).ok());
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendTest,
                         ::testing::Values(Backend::kGloo, Backend::kGlooTcp,
                                           Backend::kFake),
                         [](const auto& info) { return BackendName(info.param); });

// The owner's step on one piece must not hold up the transfers of the next.
// Rank 0 (the root) issues: a step on z (busy until told), the reduction of a,
// a step on a, the reduction of b. While the first step runs, the reduction
// of a cannot complete, so the step on a waits; the reduction of b touches
// neither and must still be handed to the transport, which rank 1 sees as its
// own reduction of b completing (on Gloo's pairs a send does not start before
// its receive is posted). The first step waits for exactly that, with a
// deadline, so a communicator that posts nothing behind a waiting step fails
// here instead of hanging. The fake runs the same pipeline, so it is held to
// this too.
class PipelineTest : public ::testing::TestWithParam<Backend> {};

TEST_P(PipelineTest, WaitingStepDoesNotHoldUpLaterTransfers) {
  Ranks ranks(GetParam(), 2);
  // Small enough for every ring and socket buffer, so that a send completes
  // once the receiver has posted its receive, not once it has read it.
  constexpr int64_t kCount = 256;
  absl::Notification b_reduced;  // rank 1's reduction of b has completed
  ranks.Run([&](Communicator& comm) -> absl::Status {
    std::vector<float> z(kCount, 0.0f);
    std::vector<float> a(kCount, 1.0f + comm.rank());
    std::vector<float> b(kCount, 10.0f * (1 + comm.rank()));
    std::vector<std::shared_ptr<Work>> works;
    if (comm.rank() == 0) {
      works.push_back(comm.EnqueueTouching(
          [&]() -> absl::Status {
            if (!b_reduced.WaitForNotificationWithTimeout(absl::Seconds(10))) {
              return absl::DeadlineExceededError(
                  "the reduction of b was held up behind the step on a");
            }
            return absl::OkStatus();
          },
          {{z.data(), kCount * 4}}));
    }
    works.push_back(comm.Reduce(a.data(), kCount, DataType::kFloat32, 0));
    if (comm.rank() == 0) {
      works.push_back(comm.EnqueueTouching(
          [&]() -> absl::Status {
            for (float& x : a) x *= 2;
            return absl::OkStatus();
          },
          {{a.data(), kCount * 4}}));
    }
    std::shared_ptr<Work> reduce_b =
        comm.Reduce(b.data(), kCount, DataType::kFloat32, 0);
    if (comm.rank() == 1) {
      reduce_b->OnCompletion([&](absl::Status status) {
        if (status.ok()) b_reduced.Notify();
      });
    }
    works.push_back(reduce_b);
    for (auto& w : works) RETURN_IF_ERROR(w->Wait(kWait));
    if (comm.rank() == 0) {
      EXPECT_EQ(a[0], 2 * (1.0f + 2.0f));
      EXPECT_EQ(b[kCount - 1], 10.0f + 20.0f);
    }
    return absl::OkStatus();
  });
}

INSTANTIATE_TEST_SUITE_P(AllBackends, PipelineTest,
                         ::testing::Values(Backend::kGloo, Backend::kGlooTcp,
                                           Backend::kFake),
                         [](const auto& info) { return BackendName(info.param); });

TEST(GlooCommunicatorTest, RendezvousTimesOutWithoutPeers) {
  InMemoryKvStore store;
  GlooOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.timeout = absl::Milliseconds(300);
  EXPECT_THAT(CreateGlooCommunicator(options, store).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

// A store that counts what the ranks put into and read from it.
class CountingKvStore : public KvClient {
 public:
  struct Counts {
    int64_t puts = 0;
    int64_t put_bytes = 0;
    int64_t gets = 0;
    int64_t get_bytes = 0;
    // GetMany calls (each also counted key by key in `gets`): what goes to
    // the coordinator as one KvGetMany.
    int64_t reads = 0;
  };

  absl::Status Put(const std::string& key, const std::string& value) override {
    absl::MutexLock lock(&mu_);
    ++counts_.puts;
    counts_.put_bytes += static_cast<int64_t>(value.size());
    return inner_.Put(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    absl::StatusOr<std::string> value = inner_.Get(key, timeout);
    absl::MutexLock lock(&mu_);
    ++counts_.gets;
    if (value.ok()) counts_.get_bytes += static_cast<int64_t>(value->size());
    return value;
  }
  absl::StatusOr<std::vector<std::string>> GetMany(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    {
      absl::MutexLock lock(&mu_);
      ++counts_.reads;
    }
    return KvClient::GetMany(keys, timeout);
  }
  Counts counts() {
    absl::MutexLock lock(&mu_);
    return counts_;
  }

 private:
  InMemoryKvStore inner_;
  absl::Mutex mu_;
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

// The TCP rendezvous goes through the coordinator's store: per context one
// record per rank (its pairs' host and ports, 128 + 2 * (n - 1) bytes),
// read once by each peer, all of a rank's in one read (one KvGetMany). With
// Gloo's connectFullMesh this was, at n = 12, 48 puts, 660 gets and 790,152
// bytes read; now 24, 264 keys in 24 reads, and 39,600.
TEST(GlooCommunicatorTest, TcpRendezvousIsASmallRecordPerRank) {
  constexpr int kWorld = 12;
  CountingKvStore store;
  GlooOptions options;
  options.timeout = absl::Seconds(30);
  options.shared_memory = false;
  ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Communicator>> comms,
                       CreateGlooRanks(kWorld, options, store));
  // Two contexts (one per direction), a record each.
  const CountingKvStore::Counts counts = store.counts();
  EXPECT_EQ(counts.puts, 2 * kWorld);
  EXPECT_EQ(counts.gets, 2 * kWorld * (kWorld - 1));
  EXPECT_EQ(counts.reads, 2 * kWorld);
  const int64_t record = 128 + 2 * (kWorld - 1);
  EXPECT_EQ(counts.put_bytes, 2 * kWorld * record);
  EXPECT_EQ(counts.get_bytes, 2 * kWorld * (kWorld - 1) * record);
  // And the mesh works: every rank reaches every other.
  std::vector<absl::Status> statuses = RunRanks(kWorld, [&](int r) {
    float value = static_cast<float>(r);
    RETURN_IF_ERROR(
        comms[r]->AllReduce(&value, 1, DataType::kFloat32)->Wait(kWait));
    if (value != kWorld * (kWorld - 1) / 2) {
      return absl::InternalError(absl::StrCat("sum ", value));
    }
    return absl::OkStatus();
  });
  EXPECT_OK(FirstError(statuses));
}

// What a TCP mesh holds open, per rank and peer: the figure the headroom
// check before connecting (tcp_link.h, kTcpMeshFilesPerPeer) rests on.
TEST(GlooCommunicatorTest, TcpMeshHoldsTheFilesItChecksFor) {
  constexpr int kWorld = 8;
  InMemoryKvStore store;
  GlooOptions options;
  options.timeout = absl::Seconds(30);
  options.shared_memory = false;
  ASSERT_OK_AND_ASSIGN(const int64_t before, CountOpenFiles());
  {
    ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Communicator>> comms,
                         CreateGlooRanks(kWorld, options, store));
    ASSERT_OK_AND_ASSIGN(const int64_t connected, CountOpenFiles());
    const int64_t per_rank = (connected - before) / kWorld;
    std::printf("TCP mesh of %d ranks: %lld files per rank\n", kWorld,
                static_cast<long long>(per_rank));
    EXPECT_LE(per_rank, kTcpMeshFilesPerPeer * (kWorld - 1) +
                            kTcpMeshFilesPerRank);
    EXPECT_GE(per_rank, 2 * (kWorld - 1));
  }
  EXPECT_EQ(*CountOpenFiles(), before);
}

// A mesh whose sockets would not fit under RLIMIT_NOFILE is refused before
// it opens any, naming the limit.
TEST(GlooCommunicatorTest, TcpMeshOverTheOpenFileLimitIsRefusedUpFront) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_OK_AND_ASSIGN(const int64_t open, CountOpenFiles());
  rlimit low = saved;
  low.rlim_cur = open + 8;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  InMemoryKvStore store;
  GlooOptions options;
  options.rank = 0;
  options.world_size = 64;
  options.timeout = absl::Seconds(1);
  options.shared_memory = false;
  const absl::Status refused = CreateGlooCommunicator(options, store).status();
  setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_THAT(refused,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::AllOf(
                           ::testing::HasSubstr("TCP mesh of 64 ranks needs"),
                           ::testing::HasSubstr("raise the nofile limit"))));
  EXPECT_EQ(*CountOpenFiles(), open);
}

TEST(GlooCommunicatorTest, RejectsBadRank) {
  InMemoryKvStore store;
  GlooOptions options;
  options.rank = 2;
  options.world_size = 2;
  EXPECT_THAT(CreateGlooCommunicator(options, store).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("rank 2")));
}

}  // namespace
}  // namespace pshard::worker
