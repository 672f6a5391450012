#include "common/proto_time.h"

#include "common/job_state.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

TEST(ProtoTimeTest, DurationsRoundTripToTheNanosecond) {
  for (absl::Duration d : {absl::ZeroDuration(), absl::Nanoseconds(1),
                           absl::Milliseconds(1500), -absl::Milliseconds(1500),
                           absl::Hours(30) + absl::Nanoseconds(7)}) {
    EXPECT_EQ(FromProto(ToProto(d)), d) << d;
  }
  const google::protobuf::Duration proto = ToProto(absl::Milliseconds(1500));
  EXPECT_EQ(proto.seconds(), 1);
  EXPECT_EQ(proto.nanos(), 500000000);
}

TEST(ProtoTimeTest, TimestampsRoundTripToTheNanosecond) {
  const absl::Time t = absl::FromUnixNanos(1796218660537887981);
  EXPECT_EQ(FromProto(ToProto(t)), t);
  EXPECT_EQ(ToProto(t).seconds(), 1796218660);
}

TEST(JobStateTest, OnlyEndedStatesAreTerminal) {
  EXPECT_TRUE(IsTerminal(v1::SUCCEEDED));
  EXPECT_TRUE(IsTerminal(v1::FAILED));
  EXPECT_TRUE(IsTerminal(v1::CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::QUEUED));
  EXPECT_FALSE(IsTerminal(v1::STARTING));
  EXPECT_FALSE(IsTerminal(v1::RUNNING));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_UNSPECIFIED));
}

}  // namespace
}  // namespace pshard
