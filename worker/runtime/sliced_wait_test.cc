#include "worker/runtime/sliced_wait.h"

#include <optional>
#include <vector>

#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A wait whose time only moves when an attempt or a pause says so: a
// FakeClock that jumps to the end of every pause. Attempts record the slice
// they were given and the time they were made at; a pause is the time
// between an attempt and the next one that the attempt did not spend.
class SlicedWaitTest : public ::testing::Test {
 protected:
  SlicedWaitTest() { clock_.set_advance_on_sleep(true); }

  SlicedWaitOptions Options(absl::Duration timeout) {
    SlicedWaitOptions options;
    options.timeout = timeout;
    options.clock = &clock_;
    return options;
  }

  static absl::Status NotAborted() { return absl::OkStatus(); }

  // Called first by every attempt: notes its slice, and the pause since the
  // previous attempt ended.
  void Attempted(absl::Duration slice) {
    ClosePause();
    slices_.push_back(slice);
  }
  // Called by an attempt that spent `spent` of its slice before it ended.
  void Spend(absl::Duration spent) {
    clock_.Advance(spent);
    last_end_ = clock_.Now();
  }
  // The pauses so far, the one after the last attempt included.
  std::vector<absl::Duration> Pauses() {
    ClosePause();
    return pauses_;
  }

 private:
  void ClosePause() {
    const absl::Time now = clock_.Now();
    if (last_end_.has_value() && now > *last_end_) {
      pauses_.push_back(now - *last_end_);
    }
    last_end_ = now;
  }

 protected:
  FakeClock clock_;
  std::optional<absl::Time> last_end_;
  std::vector<absl::Duration> slices_;
  std::vector<absl::Duration> pauses_;
};

TEST_F(SlicedWaitTest, RetriesSlicesThatRunOutUntilOneSucceeds) {
  int calls = 0;
  EXPECT_THAT(WaitInSlices(Options(absl::Seconds(10)), "key", NotAborted,
                           [&](absl::Duration slice) {
                             Attempted(slice);
                             if (++calls == 3) return absl::OkStatus();
                             Spend(slice);
                             return absl::DeadlineExceededError("slice over");
                           }),
              IsOk());
  EXPECT_THAT(slices_, ElementsAre(absl::Seconds(1), absl::Seconds(1),
                                   absl::Seconds(1)));
  EXPECT_THAT(Pauses(), IsEmpty());
}

TEST_F(SlicedWaitTest, TimesOutWithTheLastSliceCutToWhatIsLeft) {
  EXPECT_THAT(WaitInSlices(Options(absl::Milliseconds(2500)),
                           "assignment of job j epoch 1 not published",
                           NotAborted,
                           [&](absl::Duration slice) {
                             Attempted(slice);
                             Spend(slice);
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
                             Attempted(slice);
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
                    Attempted(slice);
                    Spend(slice);
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
                             Attempted(slice);
                             if (++calls <= 2) {
                               return absl::UnavailableError("connect failed");
                             }
                             return absl::OkStatus();
                           }),
              IsOk());
  EXPECT_THAT(Pauses(), ElementsAre(absl::Milliseconds(200),
                                   absl::Milliseconds(200)));
  // The pauses came off the deadline: the third slice is still a full one.
  EXPECT_THAT(slices_, ElementsAre(absl::Seconds(1), absl::Seconds(1),
                                   absl::Seconds(1)));
}

TEST_F(SlicedWaitTest, PausesNeverRunPastTheDeadline) {
  EXPECT_THAT(WaitInSlices(Options(absl::Milliseconds(300)), "key",
                           NotAborted,
                           [&](absl::Duration slice) {
                             Attempted(slice);
                             return absl::UnavailableError("connect failed");
                           }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("key")));
  EXPECT_THAT(Pauses(), ElementsAre(absl::Milliseconds(200),
                                   absl::Milliseconds(100)));
  EXPECT_THAT(slices_, ElementsAre(absl::Milliseconds(300),
                                   absl::Milliseconds(100)));
}

TEST_F(SlicedWaitTest, OtherErrorsEndTheWaitAsTheyAre) {
  EXPECT_THAT(WaitInSlices(Options(absl::Minutes(5)), "key", NotAborted,
                           [&](absl::Duration slice) {
                             Attempted(slice);
                             return absl::FailedPreconditionError(
                                 "epoch 3 is over");
                           }),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "epoch 3 is over"));
  EXPECT_EQ(slices_.size(), 1u);
}

}  // namespace
}  // namespace pshard::worker
