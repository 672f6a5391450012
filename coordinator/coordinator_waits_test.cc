// Coordinator facade tests: rendezvous and other blocking waits, their caps, deadlines and the notifier thread.
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointee;
using ::testing::SizeIs;

TEST_F(CoordinatorTest, KvWaitsAndErrors) {
  options_.worker_timeout = absl::Hours(1);  // the test moves time a lot
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  job = GetJob(job.id());
  const absl::Time later = clock_.Now() + absl::Seconds(2);
  // A blocked get is answered by the put.
  Capture<std::string> first;
  Capture<std::string> second;
  c_->KvGet(job.id(), 1, "addr", later, first.Callback());
  c_->KvGet(job.id(), 1, "addr", later, second.Callback());
  EXPECT_FALSE(first.result.has_value());
  v1::KvPutRequest put;
  put.set_job_id(job.id());
  put.set_epoch(1);
  put.set_key("addr");
  put.set_value("10.0.0.1:1234");
  ASSERT_OK(c_->KvPut(put));
  ASSERT_TRUE(first.result.has_value() && second.result.has_value());
  EXPECT_EQ(**first.result, "10.0.0.1:1234");
  EXPECT_EQ(**second.result, "10.0.0.1:1234");
  // A get that times out, on the fake clock.
  Capture<std::string> timeout;
  c_->KvGet(job.id(), 1, "missing", later, timeout.Callback());
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  EXPECT_FALSE(timeout.result.has_value());
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  ASSERT_TRUE(timeout.result.has_value());
  EXPECT_THAT(*timeout.result, StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  // A deadline in the past answers at once.
  Capture<std::string> past;
  c_->KvGet(job.id(), 1, "missing", clock_.Now(), past.Callback());
  ASSERT_TRUE(past.result.has_value());
  EXPECT_THAT(*past.result, StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  // Waits are capped at max_wait.
  Capture<std::string> capped;
  c_->KvGet(job.id(), 1, "missing", absl::InfiniteFuture(), capped.Callback());
  clock_.Advance(options_.max_wait);
  c_->Tick();
  ASSERT_TRUE(capped.result.has_value());
  // A cancelled wait never calls back.
  Capture<std::string> cancelled;
  auto id = c_->KvGet(job.id(), 1, "later", clock_.Now() + absl::Seconds(5),
                      cancelled.Callback());
  EXPECT_NE(id, 0u);
  c_->CancelWait(id);
  put.set_key("later");
  ASSERT_OK(c_->KvPut(put));
  EXPECT_FALSE(cancelled.result.has_value());
  c_->CancelWait(id);  // twice is fine

  // Bad input.
  put.set_key("");
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key")));
  put.set_key(std::string(513, 'k'));
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key")));
  put.set_key("k");
  put.set_value(std::string((1 << 20) + 1, 'v'));
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("value")));
  put.set_value("v");
  put.set_epoch(0);
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
  put.set_epoch(1);
  put.set_job_id("job-3");
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  Capture<std::string> bad;
  c_->KvGet(job.id(), 1, "", later, bad.Callback());
  EXPECT_THAT(*bad.result, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  Capture<std::string> stale;
  c_->KvGet(job.id(), 7, "k", later, stale.Callback());
  EXPECT_THAT(*stale.result, StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

TEST_F(CoordinatorTest, KvGetManyWaitsForEveryKeyWhateverOrderTheyArrive) {
  options_.max_kv_read_bytes = 7;
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  const absl::Time later = clock_.Now() + absl::Seconds(2);
  auto put = [&](const std::string& key, const std::string& value) {
    v1::KvPutRequest req;
    req.set_job_id(job.id());
    req.set_epoch(1);
    req.set_key(key);
    req.set_value(value);
    ASSERT_OK(c_->KvPut(req));
  };
  Capture<std::vector<KvValue>> all;
  EXPECT_NE(c_->KvGetMany(job.id(), 1, {"r/0", "r/1", "r/2"}, later,
                          all.Callback()),
            0u);
  // Last key first: the read waits on, one key at a time.
  put("r/2", "cc");
  put("r/0", "aa");
  EXPECT_FALSE(all.result.has_value());
  put("r/1", "bb");
  ASSERT_TRUE(all.result.has_value());
  EXPECT_THAT(**all.result,
              ElementsAre(Pointee(std::string("aa")), Pointee(std::string("bb")),
                          Pointee(std::string("cc"))));
  // Present already: answered at once, cut at max_kv_read_bytes.
  put("r/3", "dddd");
  Capture<std::vector<KvValue>> capped;
  EXPECT_EQ(c_->KvGetMany(job.id(), 1, {"r/0", "r/1", "r/3"}, later,
                          capped.Callback()),
            0u);
  EXPECT_THAT(**capped.result, ElementsAre(Pointee(std::string("aa")),
                                           Pointee(std::string("bb"))));
  // A deadline names the first key missing.
  Capture<std::vector<KvValue>> missing;
  c_->KvGetMany(job.id(), 1, {"r/0", "r/9", "r/8"}, later, missing.Callback());
  clock_.Advance(absl::Seconds(2));
  c_->Tick();
  EXPECT_THAT(*missing.result,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("\"r/9\" did not appear before the deadline "
                                 "(1 of 3 keys read were present)")));
  // Bad input names the key's index; KvGet's names the key.
  Capture<std::vector<KvValue>> bad;
  c_->KvGetMany(job.id(), 1, {"r/0", ""}, later, bad.Callback());
  EXPECT_THAT(*bad.result,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("keys[1]")));
  Capture<std::vector<KvValue>> none;
  c_->KvGetMany(job.id(), 1, {}, later, none.Callback());
  EXPECT_THAT(*none.result, StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("got 0")));
  // A job that ends fails the read still waiting.
  Capture<std::vector<KvValue>> ended;
  c_->KvGetMany(job.id(), 1, {"r/0", "r/7"}, clock_.Now() + absl::Seconds(5),
                ended.Callback());
  ASSERT_OK(c_->CancelJob(job.id(), "").status());
  ASSERT_TRUE(ended.result.has_value());
  EXPECT_THAT(*ended.result, StatusIs(absl::StatusCode::kAborted, ::testing::_));
}

TEST_F(CoordinatorTest, KvStoreIsCappedPerJob) {
  options_.max_kv_keys_per_job = 2;
  options_.max_kv_bytes_per_job = 100;
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  v1::KvPutRequest put;
  put.set_job_id(job.id());
  put.set_epoch(1);
  put.set_key("a");
  put.set_value(std::string(60, 'x'));
  ASSERT_OK(c_->KvPut(put));
  put.set_key("b");
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("bytes")));
  put.set_value("y");
  ASSERT_OK(c_->KvPut(put));
  put.set_key("c");
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("keys")));
  put.set_key("a");  // overwriting stays within the caps
  ASSERT_OK(c_->KvPut(put));
}

TEST_F(CoordinatorTest, KvStoresAreCappedTogether) {
  options_.max_kv_bytes_total = 100;
  Open(":memory:");
  Register("a");
  Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job j1, c_->SubmitJob(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job j2, c_->SubmitJob(Spec(1)));
  v1::KvPutRequest put;
  put.set_job_id(j1.id());
  put.set_epoch(1);
  put.set_key("k");
  put.set_value(std::string(70, 'x'));
  ASSERT_OK(c_->KvPut(put));
  put.set_job_id(j2.id());
  EXPECT_THAT(c_->KvPut(put),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("all jobs")));
  ASSERT_OK(c_->CancelJob(j1.id(), ""));  // frees j1's store
  ASSERT_OK(c_->KvPut(put));
}

TEST_F(CoordinatorTest, WaitersAreCapped) {
  options_.max_waiters = 1;
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  Capture<std::string> one, two;
  c_->KvGet(job.id(), 1, "x", clock_.Now() + absl::Seconds(1), one.Callback());
  c_->KvGet(job.id(), 1, "x", clock_.Now() + absl::Seconds(1), two.Callback());
  EXPECT_FALSE(one.result.has_value());
  ASSERT_TRUE(two.result.has_value());
  EXPECT_THAT(*two.result, StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
}

TEST_F(CoordinatorTest, ManyWaitersAreAnsweredOnTheNotifierThread) {
  options_.max_inline_callbacks = 4;
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  job = GetJob(job.id());
  std::vector<Capture<Coordinator::AssignmentPtr>> waits(50);
  for (auto& w : waits) {
    c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(60), w.Callback());
  }
  PublishLayout(job, {10});
  ASSERT_TRUE(c_->WaitForNotifier(absl::Seconds(30)));
  for (auto& w : waits) {
    ASSERT_TRUE(w.result.has_value());
    EXPECT_OK(*w.result);
  }
}

TEST_F(CoordinatorTest, WaitForEvents) {
  StatusCapture missing;
  c_->WaitForEvents("job-1", 0, clock_.Now() + absl::Seconds(1), missing.Callback());
  EXPECT_THAT(*missing.result, StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  StatusCapture ready;
  c_->WaitForEvents(job.id(), 0, clock_.Now() + absl::Seconds(1), ready.Callback());
  EXPECT_OK(*ready.result);
  StatusCapture wait;
  c_->WaitForEvents(job.id(), 1, clock_.Now() + absl::Seconds(5), wait.Callback());
  EXPECT_FALSE(wait.result.has_value());
  Register("a");  // starts the job: a new event
  ASSERT_TRUE(wait.result.has_value());
  EXPECT_OK(*wait.result);
  StatusCapture timeout;
  c_->WaitForEvents(job.id(), 2, clock_.Now() + absl::Seconds(5), timeout.Callback());
  clock_.Advance(absl::Seconds(5));
  c_->Tick();
  EXPECT_THAT(*timeout.result, StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  EXPECT_THAT(c_->GetEvents(job.id(), -1, 10), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  ASSERT_OK_AND_ASSIGN(auto batch, c_->GetEvents(job.id(), 1, 10));
  ASSERT_THAT(batch.events, SizeIs(1));
  EXPECT_EQ(batch.events[0].sequence(), 2);
  EXPECT_FALSE(batch.terminal);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
