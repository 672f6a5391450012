#include "common/open_files.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Restores RLIMIT_NOFILE as it was when the test started.
class OpenFilesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved_), 0); }
  void TearDown() override { setrlimit(RLIMIT_NOFILE, &saved_); }

  void SetSoftLimit(rlim_t soft) {
    rlimit limit = saved_;
    limit.rlim_cur = soft;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  }

  rlimit saved_{};
};

TEST_F(OpenFilesTest, CountsTheDescriptorsThisProcessOpens) {
  ASSERT_OK_AND_ASSIGN(const int64_t before, CountOpenFiles());
  const int fd = open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(*CountOpenFiles(), before + 1);
  close(fd);
  EXPECT_EQ(*CountOpenFiles(), before);
}

TEST_F(OpenFilesTest, RaiseLiftsTheSoftLimitToTheHardOne) {
  if (saved_.rlim_max == RLIM_INFINITY || saved_.rlim_max < 64) {
    GTEST_SKIP() << "needs a finite hard limit of at least 64, have "
                 << saved_.rlim_max;
  }
  SetSoftLimit(saved_.rlim_max / 2);
  ASSERT_OK_AND_ASSIGN(OpenFileLimit raised, RaiseOpenFileLimit());
  EXPECT_EQ(raised.soft, saved_.rlim_max);
  EXPECT_EQ(raised.hard, saved_.rlim_max);
  // Already at the hard limit: nothing changes.
  EXPECT_OK(RaiseOpenFileLimit());
  EXPECT_EQ(GetOpenFileLimit()->soft, saved_.rlim_max);
}

TEST_F(OpenFilesTest, HeadroomIsCheckedAgainstTheSoftLimitAndNamesTheNeed) {
  ASSERT_OK_AND_ASSIGN(const int64_t open, CountOpenFiles());
  SetSoftLimit(open + 10);
  EXPECT_OK(CheckOpenFileHeadroom(10, "a test"));
  EXPECT_THAT(CheckOpenFileHeadroom(11, "a TCP mesh of 7 ranks"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("a TCP mesh of 7 ranks needs 11 more "
                                       "open files, but only 10 fit"),
                             HasSubstr("raise the nofile limit"))));
}

}  // namespace
}  // namespace pshard
