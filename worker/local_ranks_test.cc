#include "worker/local_ranks.h"

#include <csignal>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(LocalRanksTest, CountIsValidated) {
  EXPECT_OK(ValidateLocalRanks(1, "cpu"));
  EXPECT_OK(ValidateLocalRanks(64, "auto"));
  EXPECT_OK(ValidateLocalRanks(1, "cuda:3"));
  for (int bad : {0, -1, 65}) {
    EXPECT_THAT(ValidateLocalRanks(bad, "cpu"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("--local_ranks: want 1..64")));
  }
  // One GPU cannot be N ranks'.
  EXPECT_THAT(ValidateLocalRanks(2, "cuda:0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--device=cuda:0 names one GPU")));
}

TEST(LocalRanksTest, EachChildGetsItsDevice) {
  EXPECT_EQ(*ChildDeviceFlag("cpu", 1, 2, 8), "cpu");
  EXPECT_EQ(*ChildDeviceFlag("auto", 0, 2, 0), "cpu");
  EXPECT_EQ(*ChildDeviceFlag("auto", 3, 4, 8), "cuda:3");
  EXPECT_THAT(ChildDeviceFlag("auto", 0, 4, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("2 CUDA devices")));
}

TEST(LocalRanksTest, FixedPortsMoveByTheLocalRank) {
  EXPECT_EQ(*OffsetListenPort("0.0.0.0:7071", 3), "0.0.0.0:7074");
  EXPECT_EQ(*OffsetListenPort("[::]:9000", 1), "[::]:9001");
  EXPECT_EQ(*OffsetListenPort("127.0.0.1:0", 5), "127.0.0.1:0");
  EXPECT_EQ(*OffsetListenPort("", 5), "");
  EXPECT_THAT(OffsetListenPort("nohost", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host:port")));
  EXPECT_THAT(OffsetListenPort("h:65535", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("65535")));
}

TEST(LocalRanksTest, ChildArgvOverridesThePerRankFlags) {
  LocalRanksPlan plan;
  plan.binary = "/bin/pshard-worker";
  plan.specified_flags = {{"coordinator", "c:7070"},
                          {"local_ranks", "2"},
                          {"name", "node-a"},
                          {"port_file", "/tmp/p"},
                          {"metrics_listen", "0.0.0.0:9100"},
                          {"metrics_port_file", "/tmp/m"},
                          {"log_dir", "/logs"},
                          {"control_dir", "/run/pshard"},
                          {"token_file", "/secret/token"},
                          {"device", "auto"}};
  plan.name = "node-a";
  plan.host = "node-a.pool";
  plan.listen = "0.0.0.0:7071";
  plan.device_flag = "auto";
  plan.cuda_device_count = 0;
  plan.local_ranks = 2;
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> argv, ChildArgv(plan, 1));
  EXPECT_EQ(argv[0], "/bin/pshard-worker");
  EXPECT_THAT(argv, Contains("--coordinator=c:7070"));
  EXPECT_THAT(argv, Contains("--token_file=/secret/token"));
  EXPECT_THAT(argv, Contains("--local_ranks=1"));
  EXPECT_THAT(argv, Contains("--local_rank=1"));
  EXPECT_THAT(argv, Contains("--local_world_size=2"));
  EXPECT_THAT(argv, Contains("--name=node-a:1"));
  EXPECT_THAT(argv, Contains("--host=node-a.pool"));
  EXPECT_THAT(argv, Contains("--device=cpu"));
  EXPECT_THAT(argv, Contains("--listen=0.0.0.0:7072"));
  EXPECT_THAT(argv, Contains("--port_file=/tmp/p.1"));
  EXPECT_THAT(argv, Contains("--metrics_listen=0.0.0.0:9101"));
  EXPECT_THAT(argv, Contains("--metrics_port_file=/tmp/m.1"));
  EXPECT_THAT(argv, Contains("--log_dir=/logs/1"));
  EXPECT_THAT(argv, Contains("--control_dir=/run/pshard/1"));
  EXPECT_THAT(argv, Not(Contains("--control_dir=/run/pshard")));
  EXPECT_THAT(argv, Not(Contains("--local_ranks=2")));
  EXPECT_THAT(argv, Not(Contains("--name=node-a")));
  EXPECT_THAT(argv, Not(Contains("--port_file=/tmp/p")));
  // No --health_listen was given: none is made up.
  for (const std::string& arg : argv) {
    EXPECT_THAT(arg, Not(HasSubstr("health"))) << arg;
  }
  plan.listen = "0.0.0.0:65535";
  EXPECT_THAT(ChildArgv(plan, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--listen")));
}

// The supervision itself (the e2e test runs real workers): children that
// exit at once, here /bin/sh refusing the "--local_ranks=1" option, end the
// node with a failing status rather than being restarted.
TEST(LocalRanksTest, ChildrenThatExitEndTheNodeWithTheirStatus) {
  LocalRanksPlan plan;
  plan.binary = "/bin/sh";
  plan.name = "n";
  plan.host = "h";
  plan.listen = "127.0.0.1:0";
  plan.local_ranks = 2;
  volatile std::sig_atomic_t stop = 0;
  EXPECT_EQ(SuperviseLocalRanks(plan, &stop, absl::Seconds(5)), 2);
}

}  // namespace
}  // namespace pshard::worker
