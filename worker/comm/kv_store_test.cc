#include "worker/comm/kv_store.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// An in-memory store that counts GetMany calls.
class CountingStore : public InMemoryKvStore {
 public:
  absl::StatusOr<std::vector<std::string>> GetMany(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    ++reads;
    return KvClient::GetMany(keys, timeout);
  }
  int reads = 0;
};

TEST(KvStoreTest, GetFromEveryPeerIsIndexedByRankWithOneRead) {
  CountingStore kv;
  for (int r = 0; r < 4; ++r) {
    ASSERT_OK(kv.Put(absl::StrCat("k/", r), absl::StrCat("v", r)));
  }
  const auto key_of = [](int r) { return absl::StrCat("k/", r); };
  for (int rank : {0, 2, 3}) {
    ASSERT_OK_AND_ASSIGN(
        std::vector<std::string> values,
        GetFromEveryPeer(kv, 4, rank, key_of, absl::Seconds(1)));
    std::vector<std::string> want = {"v0", "v1", "v2", "v3"};
    want[rank].clear();
    EXPECT_EQ(values, want) << "rank " << rank;
  }
  EXPECT_EQ(kv.reads, 3);
  // A world of one has no peers: its own empty entry.
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> alone,
                       GetFromEveryPeer(kv, 1, 0, key_of, absl::Seconds(1)));
  EXPECT_THAT(alone, ElementsAre(""));
}

TEST(KvStoreTest, GetFromEveryPeerFailsAsTheStoreDoes) {
  InMemoryKvStore kv;
  ASSERT_OK(kv.Put("k/0", "v0"));
  EXPECT_THAT(GetFromEveryPeer(
                  kv, 3, 0, [](int r) { return absl::StrCat("k/", r); },
                  absl::Milliseconds(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("k/1")));
}

}  // namespace
}  // namespace pshard::worker
