// Tests of each Link kind (TCP over Gloo's pairs, shared-memory rings) under
// the same closed-form checks, parameterised over link kind x world size x
// message size: every rank exchanges with every peer through its links, so a
// world's worth of receives that add must give the sum over ranks.
#include "worker/comm/link.h"

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"
#include "worker/comm/shm_link.h"
#include "worker/comm/shm_rendezvous.h"
#include "worker/comm/tcp_link.h"

namespace pshard::worker {
namespace {

enum class LinkKind { kTcp, kShm };

std::string KindName(LinkKind kind) {
  return kind == LinkKind::kTcp ? "Tcp" : "Shm";
}

constexpr absl::Duration kWait = absl::Seconds(30);

// Every rank's links to every peer, set up concurrently, torn down together
// at the end (so no rank closes a link a peer still reads).
class LinkWorld {
 public:
  static absl::StatusOr<std::unique_ptr<LinkWorld>> Connect(
      LinkKind kind, int world, absl::Duration timeout = kWait) {
    auto links = std::unique_ptr<LinkWorld>(new LinkWorld(world));
    LinkWorld& w = *links;
    RETURN_IF_ERROR(FirstError(RunRanks(world, [&](int rank) -> absl::Status {
      GlooOptions options;
      options.rank = rank;
      options.world_size = world;
      options.timeout = timeout;
      options.key_prefix = "links/";
      options.shm_ring_bytes = 64 * 1024;  // small: messages wrap around
      w.links_[rank].assign(world, nullptr);
      if (kind == LinkKind::kTcp) {
        ASSIGN_OR_RETURN(w.tcp_[rank], TcpTransport::Connect(options, w.kv_));
        for (int r = 0; r < world; ++r) {
          if (r != rank) w.links_[rank][r] = &w.tcp_[rank]->link(r);
        }
        return absl::OkStatus();
      }
      ASSIGN_OR_RETURN(w.shm_[rank], ConnectSharedMemory(options, w.kv_));
      for (int r = 0; r < world; ++r) {
        if (r == rank) continue;
        if (w.shm_[rank][r] == nullptr) {
          return absl::InternalError(
              absl::StrCat("no shared-memory link to rank ", r));
        }
        w.links_[rank][r] = w.shm_[rank][r].get();
      }
      return absl::OkStatus();
    })));
    return links;
  }

  Link& link(int rank, int peer) { return *links_[rank][peer]; }

 private:
  explicit LinkWorld(int world)
      : tcp_(world), shm_(world), links_(world) {}

  InMemoryKvStore kv_;
  std::vector<std::unique_ptr<TcpTransport>> tcp_;
  std::vector<std::vector<std::unique_ptr<ShmLink>>> shm_;
  std::vector<std::vector<Link*>> links_;
};

float Input(int rank, int64_t count, int64_t i) {
  return static_cast<float>(rank * count + i);
}
float SumOverRanks(int n, int64_t count, int64_t i) {
  return static_cast<float>(count * n * (n - 1) / 2 + n * i);
}

// Waits for `transfers`, receives first (as the communicator does: a full
// ring is drained before a send waits for room in the peer's).
absl::Status WaitAll(std::vector<std::unique_ptr<Transfer>>& receives,
                     std::vector<std::unique_ptr<Transfer>>& sends) {
  for (auto& t : receives) RETURN_IF_ERROR(t->Wait(kWait));
  for (auto& t : sends) RETURN_IF_ERROR(t->Wait(kWait));
  return absl::OkStatus();
}

class LinkTest
    : public ::testing::TestWithParam<std::tuple<LinkKind, int, int64_t>> {
 protected:
  LinkKind kind() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
  int64_t count() const { return std::get<2>(GetParam()); }
};

// Each rank sends its input to every peer and adds every peer's into its
// own: the sum over ranks, on both lanes; a mean divides in the last
// addition only.
TEST_P(LinkTest, ReceivesThatAddGiveTheSumAndTheMean) {
  ASSERT_OK_AND_ASSIGN(auto links, LinkWorld::Connect(kind(), world()));
  const int n = world();
  const int64_t c = count();
  EXPECT_OK(FirstError(RunRanks(n, [&](int rank) -> absl::Status {
    for (int lane = 0; lane < 2; ++lane) {
      const bool mean = lane == 1;
      std::vector<float> input(c);
      for (int64_t i = 0; i < c; ++i) input[i] = Input(rank, c, i);
      std::vector<float> sum = input;
      std::vector<std::unique_ptr<Transfer>> sends, receives;
      const int last = rank == n - 1 ? n - 2 : n - 1;
      for (int r = 0; r < n; ++r) {
        if (r == rank) continue;
        Link& link = links->link(rank, r);
        ASSIGN_OR_RETURN(auto send,
                         link.Send(reinterpret_cast<char*>(input.data()),
                                   c * 4, /*tag=*/lane, lane));
        sends.push_back(std::move(send));
        Delivery into{reinterpret_cast<char*>(sum.data()), /*add=*/true,
                      DataType::kFloat32,
                      mean && r == last ? static_cast<float>(n) : 0.0f};
        ASSIGN_OR_RETURN(auto receive,
                         link.Receive(c * 4, into, /*tag=*/lane, lane));
        receives.push_back(std::move(receive));
      }
      RETURN_IF_ERROR(WaitAll(receives, sends));
      for (int64_t i = 0; i < c; ++i) {
        const float want = mean ? SumOverRanks(n, c, i) / n
                                : SumOverRanks(n, c, i);
        if (sum[i] != want) {
          return absl::InternalError(absl::StrCat(
              "lane ", lane, " element ", i, ": ", sum[i], ", want ", want));
        }
      }
    }
    return absl::OkStatus();
  })));
}

// Several messages per lane, both lanes interleaved: the i-th receive of a
// lane gets the i-th send of that lane, copied.
TEST_P(LinkTest, CopiesArriveInOrderPerLane) {
  ASSERT_OK_AND_ASSIGN(auto links, LinkWorld::Connect(kind(), world()));
  const int n = world();
  const int64_t c = count();
  constexpr int kMessages = 3;
  EXPECT_OK(FirstError(RunRanks(n, [&](int rank) -> absl::Status {
    // out[m]: message m (lane m % 2) that this rank sends to every peer.
    std::vector<std::vector<float>> out(kMessages, std::vector<float>(c));
    for (int m = 0; m < kMessages; ++m) {
      for (int64_t i = 0; i < c; ++i) out[m][i] = 1000.0f * m + Input(rank, c, i);
    }
    std::vector<std::vector<std::vector<float>>> in(
        n, std::vector<std::vector<float>>(kMessages,
                                           std::vector<float>(c, -1.0f)));
    std::vector<std::unique_ptr<Transfer>> sends, receives;
    for (int m = 0; m < kMessages; ++m) {
      for (int r = 0; r < n; ++r) {
        if (r == rank) continue;
        Link& link = links->link(rank, r);
        ASSIGN_OR_RETURN(auto send,
                         link.Send(reinterpret_cast<char*>(out[m].data()),
                                   c * 4, /*tag=*/m, m % 2));
        sends.push_back(std::move(send));
        Delivery into{reinterpret_cast<char*>(in[r][m].data())};
        ASSIGN_OR_RETURN(auto receive,
                         link.Receive(c * 4, into, /*tag=*/m, m % 2));
        receives.push_back(std::move(receive));
      }
    }
    RETURN_IF_ERROR(WaitAll(receives, sends));
    for (int r = 0; r < n; ++r) {
      if (r == rank) continue;
      for (int m = 0; m < kMessages; ++m) {
        for (int64_t i = 0; i < c; ++i) {
          if (in[r][m][i] != 1000.0f * m + Input(r, c, i)) {
            return absl::InternalError(absl::StrCat(
                "message ", m, " from rank ", r, " element ", i, ": ",
                in[r][m][i]));
          }
        }
      }
    }
    return absl::OkStatus();
  })));
}

INSTANTIATE_TEST_SUITE_P(
    AllLinks, LinkTest,
    ::testing::Combine(::testing::Values(LinkKind::kTcp, LinkKind::kShm),
                       ::testing::Values(2, 3, 4),
                       ::testing::Values(int64_t{1}, int64_t{5}, int64_t{1000},
                                         int64_t{1} << 17)),
    [](const auto& info) {
      return absl::StrCat(KindName(std::get<0>(info.param)), "_World",
                          std::get<1>(info.param), "_Count",
                          std::get<2>(info.param));
    });

class LinkKindTest : public ::testing::TestWithParam<LinkKind> {};

// Rank 0 posts a receive of one float from rank 1, which sends nothing.
absl::StatusOr<std::unique_ptr<Transfer>> ReceiveOneFloat(LinkWorld& links,
                                                          float* x) {
  return links.link(0, 1).Receive(4, Delivery{reinterpret_cast<char*>(x)},
                                  /*tag=*/0, 0);
}

// A receive nobody sends ends at its deadline with DeadlineExceeded (on TCP,
// told from a broken connection by our own deadline bookkeeping, since Gloo
// throws the same exception type for both).
TEST_P(LinkKindTest, UnansweredReceiveTimesOut) {
  ASSERT_OK_AND_ASSIGN(auto links, LinkWorld::Connect(GetParam(), 2));
  float x = 0;
  ASSERT_OK_AND_ASSIGN(auto receive, ReceiveOneFloat(*links, &x));
  const absl::Time start = absl::Now();
  EXPECT_THAT(receive->Wait(absl::Milliseconds(300)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
}

// The peer closing its end fails a waiting receive long before the deadline,
// and not as a timeout.
TEST_P(LinkKindTest, PeerCloseFailsAWaitingReceive) {
  ASSERT_OK_AND_ASSIGN(auto links, LinkWorld::Connect(GetParam(), 2));
  float x = 0;
  ASSERT_OK_AND_ASSIGN(auto receive, ReceiveOneFloat(*links, &x));
  links->link(1, 0).Close();
  const absl::Time start = absl::Now();
  absl::Status status = receive->Wait(absl::Seconds(30));
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// A copy of a few bytes, not a whole number of elements, arrives intact
// (a barrier's token is one byte).
TEST_P(LinkKindTest, OddSizedCopyArrives) {
  ASSERT_OK_AND_ASSIGN(auto links, LinkWorld::Connect(GetParam(), 2));
  const std::string sent = "pshard!";
  std::string received(sent.size(), '?');
  ASSERT_OK_AND_ASSIGN(
      auto send, links->link(1, 0).Send(sent.data(), sent.size(), 0, 0));
  ASSERT_OK_AND_ASSIGN(
      auto receive,
      links->link(0, 1).Receive(sent.size(), Delivery{received.data()}, 0, 0));
  EXPECT_OK(receive->Wait(kWait));
  EXPECT_OK(send->Wait(kWait));
  EXPECT_EQ(received, sent);
}

// AbortWait releases a waiting receive with Aborted (TCP; on shared memory
// the link's Close does that, as above).
TEST(TcpLinkTest, AbortWaitReleasesAWaitingReceive) {
  ASSERT_OK_AND_ASSIGN(auto links, LinkWorld::Connect(LinkKind::kTcp, 2));
  float x = 0;
  ASSERT_OK_AND_ASSIGN(auto receive, ReceiveOneFloat(*links, &x));
  receive->AbortWait();
  EXPECT_THAT(receive->Wait(absl::Seconds(30)),
              StatusIs(absl::StatusCode::kAborted, ::testing::_));
}

INSTANTIATE_TEST_SUITE_P(AllLinks, LinkKindTest,
                         ::testing::Values(LinkKind::kTcp, LinkKind::kShm),
                         [](const auto& info) { return KindName(info.param); });

}  // namespace
}  // namespace pshard::worker
