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

// A store whose Get answers at once and records the wait it was given; the
// first Get returns only once the clock has moved, as a real wait would.
class RecordingStore : public KvClient {
 public:
  absl::Status Put(const std::string&, const std::string&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    timeouts.push_back(timeout);
    const absl::Time asked = absl::Now();
    while (timeouts.size() == 1 && absl::Now() == asked) {
    }
    return key;
  }
  std::vector<absl::Duration> timeouts;
};

TEST(KvStoreTest, DefaultGetManyBoundsTheWholeReadByTheTimeout) {
  RecordingStore kv;
  const std::vector<std::string> keys = {"a", "b", "c"};
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> values,
                       kv.GetMany(keys, absl::Seconds(10)));
  EXPECT_EQ(values, keys);
  ASSERT_EQ(kv.timeouts.size(), 3u);
  // Each key waits for what remains of one deadline, not `timeout` afresh.
  EXPECT_LE(kv.timeouts[0], absl::Seconds(10));
  EXPECT_LT(kv.timeouts[1], kv.timeouts[0]);
  EXPECT_LE(kv.timeouts[2], kv.timeouts[1]);
  // A deadline already past asks with no wait, never a negative one.
  RecordingStore late;
  ASSERT_OK(late.GetMany(keys, -absl::Seconds(1)).status());
  EXPECT_THAT(late.timeouts, ::testing::Each(absl::ZeroDuration()));
}

}  // namespace
}  // namespace pshard::worker
