// pshard-coordinator and pshard-worker as a user first meets them: --help
// lists their own flags, --version prints the version.
#include <sys/resource.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/pshardctl_runner.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

TEST(BinariesTest, CoordinatorHelpListsItsFlags) {
  CliResult r = RunBinary("server/pshard-coordinator", {"--help"});
  // Abseil's convention: exit 1 after printing help.
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out,
              AllOf(StartsWith("pshard-coordinator: the control plane"),
                    HasSubstr("usage: pshard-coordinator"),
                    HasSubstr("Flags from server/main.cc"),
                    HasSubstr("--listen"), HasSubstr("--state_path"),
                    HasSubstr("--worker_timeout"),
                    Not(HasSubstr("No flags matched")),
                    // Only the binary's own flags, not every library's.
                    Not(HasSubstr("--flagfile"))));
}

TEST(BinariesTest, WorkerHelpListsItsFlags) {
  CliResult r = RunBinary("worker/pshard-worker", {"--helpshort"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, AllOf(HasSubstr("usage: pshard-worker --coordinator="),
                           HasSubstr("Flags from worker/main.cc"),
                           HasSubstr("--coordinator"), HasSubstr("--device"),
                           HasSubstr("--log_dir"),
                           Not(HasSubstr("No flags matched"))));
}

TEST(BinariesTest, HelpListsTheSharedTransportFlags) {
  for (const char* binary : {"server/pshard-coordinator", "worker/pshard-worker"}) {
    CliResult r = RunBinary(binary, {"--help"});
    EXPECT_THAT(r.out, AllOf(HasSubstr("Flags from security/transport_flags.cc"),
                             HasSubstr("--tls_cert"), HasSubstr("--insecure")))
        << binary;
  }
}

// TLS is the default: a server with neither a certificate nor --insecure
// refuses to start, exit 2, saying what to pass.
TEST(BinariesTest, ServersWithoutCertificateOrInsecureExit2) {
  const std::string dir = MakeTempDir("no-tls");
  CliResult coordinator = RunBinary(
      "server/pshard-coordinator",
      {"--listen=127.0.0.1:0", "--state_path=" + dir + "/state.db"});
  CliResult worker = RunBinary(
      "worker/pshard-worker",
      {"--coordinator=127.0.0.1:1", "--listen=127.0.0.1:0"});
  for (const CliResult* r : {&coordinator, &worker}) {
    EXPECT_EQ(r->exit_code, 2) << r->err;
    EXPECT_THAT(r->err, HasSubstr("TLS needs --tls_cert and --tls_key (a "
                                  "certificate and its key); pass --insecure "
                                  "for plaintext"));
  }
}

// Both servers raise their open-file soft limit to the hard one (a socket
// per peer, a connection per worker): started under a soft limit of 256,
// they log the hard limit. (Logged before the TLS check exits them.)
TEST(BinariesTest, ServersRaiseTheirOpenFileLimitToTheHardOne) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max == RLIM_INFINITY || saved.rlim_max <= 256) {
    GTEST_SKIP() << "needs a finite hard limit above 256, have "
                 << saved.rlim_max;
  }
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const std::string dir = MakeTempDir("nofile");
  const CliResult coordinator = RunBinary(
      "server/pshard-coordinator",
      {"--listen=127.0.0.1:0", "--state_path=" + dir + "/state.db"});
  const CliResult worker = RunBinary(
      "worker/pshard-worker",
      {"--coordinator=127.0.0.1:1", "--listen=127.0.0.1:0"});
  setrlimit(RLIMIT_NOFILE, &saved);
  for (const CliResult* r : {&coordinator, &worker}) {
    EXPECT_THAT(r->err, HasSubstr(absl::StrCat("open files: limit ",
                                               saved.rlim_max)));
  }
}

TEST(BinariesTest, EveryBinaryPrintsOneVersion) {
  const CliResult coordinator =
      RunBinary("server/pshard-coordinator", {"--version"});
  const CliResult worker = RunBinary("worker/pshard-worker", {"--version"});
  const CliResult cli = RunBinary("cli/pshardctl", {"--version"});
  for (const CliResult* r : {&coordinator, &worker, &cli}) {
    EXPECT_EQ(r->exit_code, 0) << r->err;
  }
  EXPECT_THAT(coordinator.out,
              MatchesRegex("pshard-coordinator [0-9]+\\.[0-9]+\\.[0-9]+\n"));
  const std::string version =
      coordinator.out.substr(std::string("pshard-coordinator ").size());
  EXPECT_EQ(worker.out, "pshard-worker " + version);
  EXPECT_EQ(cli.out, "pshardctl " + version);
}

}  // namespace
}  // namespace pshard::testing
