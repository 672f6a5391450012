#include "coordinator/rendezvous_store.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointee;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

TEST(RendezvousStoreTest, PutThenGetAndWaitersOfTheKeyAreHandedBack) {
  RendezvousLimits limits;
  int64_t total = 0;
  RendezvousStore store;
  EXPECT_EQ(store.Get("addr/0"), nullptr);
  store.AddWaiter("addr/0", 7);
  store.AddWaiter("addr/0", 8);
  store.AddWaiter("addr/1", 9);
  ASSERT_OK_AND_ASSIGN(auto woken, store.Put("job-1", "addr/0", "h:1", limits,
                                             total));
  EXPECT_THAT(woken, ElementsAre(7, 8));
  ASSERT_NE(store.Get("addr/0"), nullptr);
  EXPECT_EQ(*store.Get("addr/0"), "h:1");
  EXPECT_EQ(store.bytes(), 6 + 3);
  EXPECT_EQ(total, 9);
  // Overwriting counts the new value, not the key again; no waiters left.
  ASSERT_OK_AND_ASSIGN(woken, store.Put("job-1", "addr/0", "h:12", limits,
                                        total));
  EXPECT_THAT(woken, IsEmpty());
  EXPECT_EQ(total, 10);
  // Clear hands back the waits still pending and frees the bytes.
  EXPECT_THAT(store.Clear(total), UnorderedElementsAre(9));
  EXPECT_EQ(total, 0);
  EXPECT_EQ(store.size(), 0u);
}

TEST(RendezvousStoreTest, CapsAreEnforced) {
  RendezvousLimits limits;
  limits.max_key_bytes = 4;
  limits.max_value_bytes = 8;
  limits.max_keys_per_job = 2;
  limits.max_bytes_per_job = 20;
  limits.max_bytes_total = 30;
  EXPECT_THAT(RendezvousStore::CheckKey("", limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key")));
  EXPECT_THAT(RendezvousStore::CheckKey("12345", limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1..4")));
  EXPECT_OK(RendezvousStore::CheckKey("1234", limits));
  EXPECT_THAT(RendezvousStore::CheckValue("123456789", limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 8")));
  int64_t total = 0;
  RendezvousStore a, b;
  EXPECT_OK(a.Put("job-1", "k1", "vvvvvvvv", limits, total));  // 10 bytes
  EXPECT_OK(a.Put("job-1", "k2", "vvvvvvvv", limits, total));  // 20 bytes
  EXPECT_THAT(a.Put("job-1", "k3", "v", limits, total),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("job-1: rendezvous store full (2 keys)")));
  EXPECT_THAT(a.Put("job-1", "k2", "vvvvvvvvv", limits, total),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("(20 bytes)")));
  EXPECT_OK(b.Put("job-2", "k1", "vvvvvvvv", limits, total));  // 30 in all
  EXPECT_THAT(b.Put("job-2", "k2", "v", limits, total),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("rendezvous stores of all jobs full (30")));
  EXPECT_EQ(total, 30);
  a.Clear(total);
  EXPECT_OK(b.Put("job-2", "k2", "v", limits, total));
  EXPECT_EQ(total, 13);
}

TEST(RendezvousStoreTest, AReadAdvancesOverPresentKeysAndStopsAtTheByteCap) {
  RendezvousLimits limits;
  limits.max_read_bytes = 10;
  int64_t total = 0;
  RendezvousStore store;
  KvRead read{{"a", "b", "c", "d"}};
  EXPECT_FALSE(store.Advance(read, limits));
  EXPECT_EQ(read.present, 0u);
  ASSERT_OK(store.Put("job-1", "b", "4444", limits, total).status());
  EXPECT_FALSE(store.Advance(read, limits));  // still waits for "a"
  ASSERT_OK(store.Put("job-1", "a", "333", limits, total).status());
  EXPECT_FALSE(store.Advance(read, limits));  // now for "c"
  EXPECT_EQ(read.present, 2u);
  EXPECT_EQ(read.bytes, 7);
  // "c" would make 11 bytes: the answer is the first two.
  ASSERT_OK(store.Put("job-1", "c", "7777", limits, total).status());
  EXPECT_TRUE(store.Advance(read, limits));
  EXPECT_THAT(store.Values(read, limits),
              ElementsAre(Pointee(std::string("333")), Pointee(std::string("4444"))));
  // The rest, asked again: the first value is always answered, even alone
  // over the cap.
  KvRead rest{{"c", "d"}};
  ASSERT_OK(store.Put("job-1", "c", std::string(12, 'x'), limits, total)
                .status());
  ASSERT_OK(store.Put("job-1", "d", "1", limits, total).status());
  EXPECT_TRUE(store.Advance(rest, limits));
  EXPECT_THAT(store.Values(rest, limits),
              ElementsAre(Pointee(std::string(12, 'x'))));
  // A key Put again with a larger value after Advance: Values cuts again.
  KvRead both{{"a", "b"}};
  EXPECT_TRUE(store.Advance(both, limits));
  EXPECT_EQ(both.present, 2u);
  ASSERT_OK(store.Put("job-1", "a", "999999999", limits, total).status());
  EXPECT_THAT(store.Values(both, limits),
              ElementsAre(Pointee(std::string("999999999"))));
  EXPECT_THAT(KvReadMissing(KvRead{{"a", "b", "zz"}, 2}),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("\"zz\" did not appear before the deadline "
                                 "(2 of 3 keys read were present)")));
}

TEST(RendezvousStoreTest, KeysOfAReadAreCheckedByIndex) {
  RendezvousLimits limits;
  limits.max_keys_per_read = 3;
  EXPECT_OK(RendezvousStore::CheckKeys({"a", "b", "c"}, limits));
  EXPECT_THAT(RendezvousStore::CheckKeys({}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("keys: must be 1..3 keys, got 0")));
  EXPECT_THAT(RendezvousStore::CheckKeys({"a", "b", "c", "d"}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got 4")));
  EXPECT_THAT(RendezvousStore::CheckKeys({"a", ""}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("keys[1]: key: must be 1..512 bytes")));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
