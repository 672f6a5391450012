#include "worker/comm/shm_rendezvous.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"

namespace pshard::worker {
namespace {

using Links = std::vector<std::unique_ptr<ShmLink>>;

GlooOptions Options(int rank, int world, int64_t ring_bytes = 64 * 1024) {
  GlooOptions options;
  options.rank = rank;
  options.world_size = world;
  options.timeout = absl::Seconds(20);
  options.key_prefix = "rdv/";
  options.shm_ring_bytes = ring_bytes;
  return options;
}

// Connects every rank of `world`, rank r with ring_bytes[r].
absl::StatusOr<std::vector<Links>> ConnectAll(
    const std::vector<int64_t>& ring_bytes, KvClient& kv) {
  const int world = static_cast<int>(ring_bytes.size());
  return RunRanksFor<Links>(world, [&](int rank) {
    return ConnectSharedMemory(Options(rank, world, ring_bytes[rank]), kv);
  });
}

TEST(ShmRendezvousTest, EverySameHostPairGetsALink) {
  InMemoryKvStore kv;
  ASSERT_OK_AND_ASSIGN(std::vector<Links> links,
                       ConnectAll({64 * 1024, 64 * 1024, 64 * 1024}, kv));
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(links[rank].size(), 3u);
    for (int peer = 0; peer < 3; ++peer) {
      EXPECT_EQ(links[rank][peer] != nullptr, peer != rank)
          << "rank " << rank << " peer " << peer;
    }
  }
}

// A peer on another machine (another boot id or host name) stays on TCP,
// and nothing waits for rings it will never make.
TEST(ShmRendezvousTest, PeerOnAnotherHostStaysOnTcp) {
  InMemoryKvStore kv;
  ASSERT_OK(kv.Put("rdv/shm/host/1", "another-boot-id/another-host"));
  ASSERT_OK_AND_ASSIGN(Links links, ConnectSharedMemory(Options(0, 2), kv));
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[1], nullptr);
}

// Rank 0 cannot make its rings (a ring size the channel refuses); rank 1 can.
// Shared memory needs both directions, so both ranks fall back to TCP for
// the pair: neither is left with half a link.
TEST(ShmRendezvousTest, APairUsesSharedMemoryOnlyWhenBothDirectionsWork) {
  InMemoryKvStore kv;
  ASSERT_OK_AND_ASSIGN(std::vector<Links> links, ConnectAll({100, 64 * 1024}, kv));
  EXPECT_EQ(links[0][1], nullptr);
  EXPECT_EQ(links[1][0], nullptr);
}

TEST(ShmRendezvousTest, MissingPeerIsDeadlineExceeded) {
  InMemoryKvStore kv;
  GlooOptions options = Options(0, 2);
  options.timeout = absl::Milliseconds(200);
  EXPECT_THAT(ConnectSharedMemory(options, kv).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

TEST(ShmRendezvousTest, HostIdentityIsStableAndNamesTheHost) {
  EXPECT_EQ(HostIdentity(), HostIdentity());
  EXPECT_NE(HostIdentity().find('/'), std::string::npos);
}

}  // namespace
}  // namespace pshard::worker
