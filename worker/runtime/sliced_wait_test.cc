#include "worker/runtime/sliced_wait.h"

#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A wait whose time only moves when an attempt or a pause says so.
class SlicedWaitTest : public ::testing::Test {
 protected:
  SlicedWaitOptions Options(absl::Duration timeout) {
    SlicedWaitOptions options;
    options.timeout = timeout;
    options.now = [this] { return now_; };
    options.sleep = [this](absl::Duration d) {
      pauses_.push_back(d);
      now_ += d;
    };
    return options;
  }

  static absl::Status NotAborted() { return absl::OkStatus(); }

  absl::Time now_ = absl::FromUnixSeconds(1700000000);
  std::vector<absl::Duration> slices_;
  std::vector<absl::Duration> pauses_;
};

TEST_F(SlicedWaitTest, RetriesSlicesThatRunOutUntilOneSucceeds) {
  int calls = 0;
  EXPECT_THAT(WaitInSlices(Options(absl::Seconds(10)), "key", NotAborted,
                           [&](absl::Duration slice) {
                             slices_.push_back(slice);
                             if (++calls == 3) return absl::OkStatus();
                             now_ += slice;
                             return absl::DeadlineExceededError("slice over");
                           }),
              IsOk());
  EXPECT_THAT(slices_, ElementsAre(absl::Seconds(1), absl::Seconds(1),
                                   absl::Seconds(1)));
  EXPECT_THAT(pauses_, IsEmpty());
}

TEST_F(SlicedWaitTest, TimesOutWithTheLastSliceCutToWhatIsLeft) {
  EXPECT_THAT(WaitInSlices(Options(absl::Milliseconds(2500)),
                           "assignment of job j epoch 1 not published",
                           NotAborted,
                           [&](absl::Duration slice) {
                             slices_.push_back(slice);
                             now_ += slice;
                             return absl::DeadlineExceededError("slice over");
                           }),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       "assignment of job j epoch 1 not published within "
                       "2.5s"));
  EXPECT_THAT(slices_, ElementsAre(absl::Seconds(1), absl::Seconds(1),
                                   absl::Milliseconds(500)));
}

TEST_F(SlicedWaitTest, NoTimeLeftMeansNoAttempt) {
  EXPECT_THAT(WaitInSlices(Options(absl::ZeroDuration()), "key", NotAborted,
                           [&](absl::Duration slice) {
                             slices_.push_back(slice);
                             return absl::OkStatus();
                           }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("key")));
  EXPECT_THAT(slices_, IsEmpty());
}

TEST_F(SlicedWaitTest, AnAbortEndsTheWaitBeforeTheNextAttempt) {
  bool aborted = false;
  EXPECT_THAT(WaitInSlices(
                  Options(absl::Minutes(5)), "key",
                  [&] {
                    return aborted ? absl::AbortedError("job cancelled")
                                   : absl::OkStatus();
                  },
                  [&](absl::Duration slice) {
                    slices_.push_back(slice);
                    now_ += slice;
                    if (slices_.size() == 2) aborted = true;
                    return absl::DeadlineExceededError("slice over");
                  }),
              StatusIs(absl::StatusCode::kAborted, "job cancelled"));
  EXPECT_EQ(slices_.size(), 2u);
}

TEST_F(SlicedWaitTest, UnavailablePausesThenRetries) {
  int calls = 0;
  EXPECT_THAT(WaitInSlices(Options(absl::Seconds(10)), "key", NotAborted,
                           [&](absl::Duration slice) {
                             slices_.push_back(slice);
                             if (++calls <= 2) {
                               return absl::UnavailableError("connect failed");
                             }
                             return absl::OkStatus();
                           }),
              IsOk());
  EXPECT_THAT(pauses_, ElementsAre(absl::Milliseconds(200),
                                   absl::Milliseconds(200)));
  // The pauses came off the deadline: the third slice is still a full one.
  EXPECT_THAT(slices_, ElementsAre(absl::Seconds(1), absl::Seconds(1),
                                   absl::Seconds(1)));
}

TEST_F(SlicedWaitTest, PausesNeverRunPastTheDeadline) {
  EXPECT_THAT(WaitInSlices(Options(absl::Milliseconds(300)), "key",
                           NotAborted,
                           [&](absl::Duration slice) {
                             slices_.push_back(slice);
                             return absl::UnavailableError("connect failed");
                           }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("key")));
  EXPECT_THAT(pauses_, ElementsAre(absl::Milliseconds(200),
                                   absl::Milliseconds(100)));
  EXPECT_THAT(slices_, ElementsAre(absl::Milliseconds(300),
                                   absl::Milliseconds(100)));
}

TEST_F(SlicedWaitTest, OtherErrorsEndTheWaitAsTheyAre) {
  EXPECT_THAT(WaitInSlices(Options(absl::Minutes(5)), "key", NotAborted,
                           [&](absl::Duration slice) {
                             slices_.push_back(slice);
                             return absl::FailedPreconditionError(
                                 "epoch 3 is over");
                           }),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "epoch 3 is over"));
  EXPECT_EQ(slices_.size(), 1u);
}

}  // namespace
}  // namespace pshard::worker
