#include "worker/runtime/program_log_stream.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/runtime/program_log.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr absl::Duration kPoll = absl::Milliseconds(100);
constexpr absl::Duration kWait = absl::Seconds(30);  // real time, a bound only

// Each test writes its logs with the real ProgramLog into its own log_dir and
// reads them back through the streamer; follow runs on a FakeClock, and the
// agent's "does it run this rank" is a flag the test sets.
class ProgramLogStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    log_dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/",
                            ::testing::UnitTest::GetInstance()
                                ->current_test_info()
                                ->name());
    ProgramLogStreamerOptions options;
    options.log_dir = log_dir_;
    options.worker_name = "worker w-7";
    options.poll_interval = kPoll;
    options.max_chunk_bytes = 16;
    options.clock = &clock_;
    streamer_ = std::make_unique<ProgramLogStreamer>(
        options, [this](absl::string_view job_id, int rank) {
          return running_.load() && job_id == "job-3" && rank == 1;
        });
  }

  std::unique_ptr<ProgramLog> OpenLog(int64_t max_bytes = 1 << 20) {
    absl::StatusOr<std::unique_ptr<ProgramLog>> log =
        ProgramLog::Open(ProgramLogPath(log_dir_, "job-3", 1), max_bytes);
    EXPECT_OK(log);
    return log.ok() ? *std::move(log) : nullptr;
  }

  static v1::StreamLogsRequest Request(const std::string& job_id, int rank,
                                       bool follow = false, int64_t offset = 0) {
    v1::StreamLogsRequest request;
    request.set_job_id(job_id);
    request.set_rank(rank);
    request.set_follow(follow);
    request.set_offset(offset);
    return request;
  }

  // Streams `request` on this thread; the chunks land in chunks_.
  absl::Status Stream(const v1::StreamLogsRequest& request) {
    return streamer_->Stream(
        request, [this] { return cancelled_.load(); },
        [this](const v1::LogChunk& chunk) {
          absl::MutexLock lock(&mu_);
          chunks_.push_back(chunk);
          return !client_gone_;
        });
  }

  // Everything received so far, concatenated.
  std::string Received() {
    absl::MutexLock lock(&mu_);
    std::string all;
    for (const v1::LogChunk& chunk : chunks_) all += chunk.data();
    return all;
  }

  // Waits (real time, bounded) until Received() has `n` bytes.
  bool WaitForBytes(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      size_t total = 0;
      for (const v1::LogChunk& chunk : chunks_) total += chunk.data().size();
      return total >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kWait);
  }

  // A follower on its own thread, blocked on the clock at the end of the
  // file once it has sent `bytes`.
  void StartFollower(const v1::StreamLogsRequest& request, size_t bytes) {
    follower_ = std::thread([this, request] { result_ = Stream(request); });
    ASSERT_TRUE(WaitForBytes(bytes)) << Received();
    ASSERT_TRUE(clock_.WaitForWaiters(1, kWait));
  }

  FakeClock clock_;
  std::string log_dir_;
  std::atomic<bool> running_{false};
  std::atomic<bool> cancelled_{false};
  std::unique_ptr<ProgramLogStreamer> streamer_;
  absl::Mutex mu_;
  std::vector<v1::LogChunk> chunks_ ABSL_GUARDED_BY(mu_);
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  std::thread follower_;
  absl::Status result_;
};

TEST_F(ProgramLogStreamTest, SendsTheWholeFileInBoundedChunksWithOffsets) {
  const std::string text = "0123456789abcdefghijklmnopqrstuvwxyzABCD";  // 40
  OpenLog()->Append(text);
  ASSERT_OK(Stream(Request("job-3", 1)));
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(chunks_.size(), 3u);
  EXPECT_EQ(chunks_[0].offset(), 0);
  EXPECT_EQ(chunks_[0].data(), text.substr(0, 16));
  EXPECT_EQ(chunks_[1].offset(), 16);
  EXPECT_EQ(chunks_[2].offset(), 32);
  EXPECT_EQ(chunks_[2].data(), text.substr(32));
}

TEST_F(ProgramLogStreamTest, StartsAtTheOffsetAndRefusesOnePastTheEnd) {
  OpenLog()->Append("hello\nworld\n");
  ASSERT_OK(Stream(Request("job-3", 1, false, 6)));
  EXPECT_EQ(Received(), "world\n");
  // At the end: nothing to send, not an error.
  EXPECT_OK(Stream(Request("job-3", 1, false, 12)));
  EXPECT_THAT(Stream(Request("job-3", 1, false, 13)),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("offset 13 is past the end of the log of "
                                 "job-3 rank 1 (12 bytes)")));
}

TEST_F(ProgramLogStreamTest, RefusesWhatIsNotAJobIdARankOrAnOffset) {
  for (const std::string& bad : std::vector<std::string>{
           "", "..", ".", "../job-3", "job-3/../../etc", "a b", "job\n3",
           std::string(129, 'j')}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(Stream(Request(bad, 1)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         StartsWith("job_id: ")));
  }
  EXPECT_THAT(Stream(Request("job-3", -1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank: must be >= 0, got -1")));
  EXPECT_THAT(Stream(Request("job-3", 1, false, -5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("offset: must be >= 0, got -5")));
  EXPECT_OK(ValidateStreamLogsRequest(Request(std::string(128, 'j'), 0)));
}

TEST_F(ProgramLogStreamTest, UnknownJobOrRankIsNotFoundNamingBoth) {
  OpenLog()->Append("x\n");
  EXPECT_THAT(Stream(Request("job-4", 1)),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("worker w-7 has no log of job-4 rank 1")));
  EXPECT_THAT(Stream(Request("job-3", 0, /*follow=*/true)),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("worker w-7 has no log of job-3 rank 0")));
}

TEST_F(ProgramLogStreamTest, FollowSendsNewOutputAndEndsOnceTheProgramIsGone) {
  running_ = true;
  std::unique_ptr<ProgramLog> log = OpenLog();
  log->Append("one\n");
  StartFollower(Request("job-3", 1, /*follow=*/true), 4);

  log->Append("two\n");
  clock_.Advance(kPoll);
  ASSERT_TRUE(WaitForBytes(8)) << Received();
  ASSERT_TRUE(clock_.WaitForWaiters(1, kWait));
  EXPECT_EQ(Received(), "one\ntwo\n");

  // The program writes its last line and exits: the follower sends it and
  // ends at once, without another wait.
  log->Append("three\n");
  log.reset();
  running_ = false;
  clock_.Advance(kPoll);
  follower_.join();
  EXPECT_OK(result_);
  EXPECT_EQ(Received(), "one\ntwo\nthree\n");
}

TEST_F(ProgramLogStreamTest, FollowWaitsForTheLogOfARankThatIsStarting) {
  running_ = true;
  // Not following: a starting rank has an empty log, not a missing one.
  EXPECT_OK(Stream(Request("job-3", 1)));
  follower_ = std::thread(
      [this] { result_ = Stream(Request("job-3", 1, /*follow=*/true)); });
  ASSERT_TRUE(clock_.WaitForWaiters(1, kWait));
  OpenLog()->Append("started\n");
  running_ = false;
  clock_.Advance(kPoll);
  follower_.join();
  EXPECT_OK(result_);
  EXPECT_EQ(Received(), "started\n");
}

TEST_F(ProgramLogStreamTest, FollowCarriesOnIntoTheRotatedFile) {
  running_ = true;
  std::unique_ptr<ProgramLog> log = OpenLog(/*max_bytes=*/1024);
  log->Append(std::string(1000, 'a'));
  StartFollower(Request("job-3", 1, /*follow=*/true), 1000);

  // 24 more bytes fill the old file; the rest goes to the new one after
  // ProgramLog's marker line.
  log->Append(std::string(100, 'b'));
  const std::string path = ProgramLogPath(log_dir_, "job-3", 1);
  const std::string expected =
      absl::StrCat(std::string(1000, 'a'), std::string(24, 'b'),
                   "[pshard: log reached 1024 bytes; earlier output in ", path,
                   ".1]\n", std::string(76, 'b'));
  clock_.Advance(kPoll);
  ASSERT_TRUE(WaitForBytes(expected.size())) << Received();
  ASSERT_TRUE(clock_.WaitForWaiters(1, kWait));
  running_ = false;
  clock_.Advance(kPoll);
  follower_.join();
  EXPECT_OK(result_);
  EXPECT_EQ(Received(), expected);
  absl::MutexLock lock(&mu_);
  bool restarted = false;
  for (size_t i = 1; i < chunks_.size(); ++i) {
    if (chunks_[i].offset() == 0) restarted = true;
  }
  EXPECT_TRUE(restarted) << "the new file's chunks start again at offset 0";
}

TEST_F(ProgramLogStreamTest, FollowEndsWhenTheClientGoesAway) {
  running_ = true;
  std::unique_ptr<ProgramLog> log = OpenLog();
  log->Append("one\n");
  StartFollower(Request("job-3", 1, /*follow=*/true), 4);
  cancelled_ = true;
  clock_.Advance(kPoll);
  follower_.join();
  EXPECT_THAT(result_, StatusIs(absl::StatusCode::kCancelled,
                                HasSubstr("log of job-3 rank 1")));

  // A failed write (the stream broke) ends it too.
  cancelled_ = false;
  {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
  }
  EXPECT_THAT(Stream(Request("job-3", 1, /*follow=*/true)),
              StatusIs(absl::StatusCode::kCancelled, ::testing::_));
}

}  // namespace
}  // namespace pshard::worker
