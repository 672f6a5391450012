#include "cli/flag_args.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// Flags of the kinds pshardctl defines, so the checks run against real
// Abseil flags.
ABSL_FLAG(std::string, output, "table", "output format");
ABSL_FLAG(int, limit, 0, "a count");
ABSL_FLAG(bool, watch, false, "a switch");
ABSL_FLAG(absl::Duration, wait_timeout, absl::Hours(1), "a duration");

namespace pshard::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ExpandShortFlagsTest, DashOIsOutput) {
  EXPECT_THAT(ExpandShortFlags({"pshardctl", "list", "-o", "json"}),
              ElementsAre("pshardctl", "list", "--output=json"));
  EXPECT_THAT(ExpandShortFlags({"pshardctl", "-o=json", "get", "job-1"}),
              ElementsAre("pshardctl", "--output=json", "get", "job-1"));
  EXPECT_THAT(ExpandShortFlags({"pshardctl", "get", "-ojson"}),
              ElementsAre("pshardctl", "get", "--output=json"));
}

TEST(ExpandShortFlagsTest, LeavesLongFlagsAndPositionalsAlone) {
  // -output is Abseil's single-dash spelling of --output, not -o utput.
  EXPECT_THAT(ExpandShortFlags({"pshardctl", "-output=json", "--", "-o"}),
              ElementsAre("pshardctl", "-output=json", "--", "-o"));
  // A dangling -o is left for CheckFlagArgs to call a missing value.
  EXPECT_THAT(ExpandShortFlags({"pshardctl", "list", "-o"}),
              ElementsAre("pshardctl", "list", "--output"));
}

TEST(CheckFlagArgsTest, ReturnsTheNamesGivenInEveryForm) {
  ASSERT_OK_AND_ASSIGN(
      std::vector<std::string> names,
      CheckFlagArgs({"pshardctl", "list", "--limit=3", "-output", "json",
                     "--watch", "--nowatch", "--wait_timeout=5m", "job-1",
                     "--version", "--", "--not_a_flag"}));
  EXPECT_THAT(names,
              ElementsAre("limit", "output", "watch", "watch", "wait_timeout"));
  EXPECT_EQ(absl::GetFlag(FLAGS_limit), 3);
  EXPECT_EQ(absl::GetFlag(FLAGS_wait_timeout), absl::Minutes(5));
}

TEST(CheckFlagArgsTest, NoFlagsNoNames) {
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> names,
                       CheckFlagArgs({"pshardctl", "get", "job-1"}));
  EXPECT_THAT(names, IsEmpty());
}

TEST(CheckFlagArgsTest, UnknownFlagIsNamed) {
  EXPECT_THAT(CheckFlagArgs({"pshardctl", "list", "--limt=3"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown flag --limt=3"));
  // --nofoo only negates a bool flag.
  EXPECT_THAT(CheckFlagArgs({"pshardctl", "list", "--nolimit"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown flag --nolimit"));
}

TEST(CheckFlagArgsTest, BadValuesSayWhatWasExpected) {
  EXPECT_THAT(CheckFlagArgs({"pshardctl", "list", "--limit=abc"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--limit=abc: not an integer"));
  EXPECT_THAT(CheckFlagArgs({"pshardctl", "drain", "--wait_timeout", "soon"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--wait_timeout=soon: not a duration")));
  EXPECT_THAT(CheckFlagArgs({"pshardctl", "submit", "--watch=maybe"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--watch=maybe: not true or false"));
  EXPECT_THAT(CheckFlagArgs({"pshardctl", "list", "--limit"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--limit: missing value"));
}

}  // namespace
}  // namespace pshard::cli
