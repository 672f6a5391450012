#include "common/status_macros.h"

#include <memory>

#include "common/grpc_status.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<std::unique_ptr<int>> MakeValue(bool ok) {
  if (!ok) return absl::NotFoundError("no value");
  return std::make_unique<int>(7);
}

absl::Status UseAssign(bool ok, int* out) {
  ASSIGN_OR_RETURN(std::unique_ptr<int> value, MakeValue(ok));
  *out = *value;
  return absl::OkStatus();
}

absl::Status UseReturnIfError(absl::Status first, bool* reached_end) {
  RETURN_IF_ERROR(first);
  *reached_end = true;
  return absl::OkStatus();
}

TEST(StatusMacrosTest, AssignOrReturnMovesValueOrPropagatesError) {
  int out = 0;
  EXPECT_OK(UseAssign(true, &out));
  EXPECT_EQ(out, 7);
  out = 0;
  EXPECT_THAT(UseAssign(false, &out),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no value")));
  EXPECT_EQ(out, 0);
}

TEST(StatusMacrosTest, ReturnIfErrorStopsOnlyOnError) {
  bool reached = false;
  EXPECT_OK(UseReturnIfError(absl::OkStatus(), &reached));
  EXPECT_TRUE(reached);
  reached = false;
  EXPECT_THAT(UseReturnIfError(absl::AbortedError("stop"), &reached),
              StatusIs(absl::StatusCode::kAborted, "stop"));
  EXPECT_FALSE(reached);
}

TEST(StatusMatchersTest, MatchersDistinguishCodesAndMessages) {
  EXPECT_THAT(absl::OkStatus(), IsOk());
  EXPECT_THAT(absl::InternalError("x"), Not(IsOk()));
  EXPECT_THAT(absl::InternalError("boom"),
              Not(StatusIs(absl::StatusCode::kInternal, HasSubstr("other"))));
  EXPECT_THAT(absl::InternalError("boom"),
              Not(StatusIs(absl::StatusCode::kUnknown, HasSubstr("boom"))));
  EXPECT_THAT(absl::StatusOr<int>(3), IsOk());
}

TEST(GrpcStatusTest, RoundTripsEveryCode) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code),
                              code == 0 ? "" : "message");
    const grpc::Status grpc_status = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(grpc_status.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(grpc_status), status);
  }
}

TEST(GrpcStatusTest, ContextPrefixesTheMessage) {
  const grpc::Status unavailable(grpc::StatusCode::UNAVAILABLE, "connection refused");
  EXPECT_THAT(FromGrpcStatus(unavailable, "Heartbeat to localhost:7070"),
              StatusIs(absl::StatusCode::kUnavailable,
                       "Heartbeat to localhost:7070: connection refused"));
  EXPECT_OK(FromGrpcStatus(grpc::Status::OK, "ignored"));
}

}  // namespace
}  // namespace pshard
