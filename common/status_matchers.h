// gMock matchers for absl::Status and absl::StatusOr, for tests only.
//
//   EXPECT_THAT(DoThing(), IsOk());
//   EXPECT_THAT(Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument,
//                                    HasSubstr("world_size")));
//   ASSERT_OK_AND_ASSIGN(auto value, MakeValue());
#ifndef PSHARD_COMMON_STATUS_MATCHERS_H_
#define PSHARD_COMMON_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace testing_internal {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace testing_internal

MATCHER(IsOk, "is OK") {
  const absl::Status& status = testing_internal::GetStatus(arg);
  if (!status.ok()) *result_listener << "status is " << status;
  return status.ok();
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& status = testing_internal::GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher,
                                       std::string(status.message()),
                                       result_listener);
}

}  // namespace pshard

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::pshard::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::pshard::IsOk())

#define ASSERT_OK_AND_ASSIGN(lhs, rexpr)                                      \
  PSHARD_ASSERT_OK_AND_ASSIGN_IMPL_(                                          \
      PSHARD_STATUS_CONCAT_(pshard_assert_statusor_, __LINE__), lhs, rexpr)

#define PSHARD_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                      \
  ASSERT_THAT(statusor.status(), ::pshard::IsOk());             \
  lhs = *std::move(statusor)

#endif  // PSHARD_COMMON_STATUS_MATCHERS_H_
