#include "worker/drain_control.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/child_process.h"
#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

std::string NewDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/drain-control-XXXXXX");
  return mkdtemp(pattern.data()) != nullptr ? pattern : "";
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Write(const std::string& path, const std::string& content) {
  std::ofstream(path) << content;
}

// The pid of a process that has exited (and been reaped).
pid_t DeadPid() {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start("true", {"/bin/true"}, "");
  EXPECT_OK(child.status());
  if (!child.ok()) return 0;
  EXPECT_TRUE((*child)->WaitFor(absl::Seconds(10)));
  return (*child)->pid();
}

TEST(DrainControlTest, OpenCreatesTheDirectoryClearsStaleFilesAndWritesThePid) {
  const std::string dir = absl::StrCat(NewDir(), "/control");
  ASSERT_OK_AND_ASSIGN(DrainControl first, DrainControl::Open(dir));
  EXPECT_EQ(Read(dir + "/pid"), absl::StrCat(getpid(), "\n"));
  EXPECT_FALSE(first.DrainRequested());
  // A previous container's request and answer (an emptyDir outlives it).
  Write(dir + "/drain", "drain\n");
  ASSERT_OK(first.MarkDrained());
  EXPECT_TRUE(first.DrainRequested());
  ASSERT_OK_AND_ASSIGN(DrainControl second, DrainControl::Open(dir));
  EXPECT_FALSE(second.DrainRequested());
  EXPECT_FALSE(Exists(dir + "/drained"));
}

TEST(DrainControlTest, OpenRejectsWhatIsNotADirectory) {
  const std::string dir = NewDir();
  Write(dir + "/file", "x");
  EXPECT_THAT(DrainControl::Open(dir + "/file").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--control_dir")));
  EXPECT_THAT(DrainControl::Open(dir + "/no/such/parent").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot create")));
  EXPECT_THAT(DrainControl::Open("").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(DrainControlTest, NoLiveWorkerIsDrainedAtOnce) {
  FakeClock clock;
  const std::string empty = NewDir();
  EXPECT_OK(DrainAndWait(empty, absl::Seconds(30), clock));
  const std::string stale = NewDir();
  Write(stale + "/pid", absl::StrCat(DeadPid(), "\n"));
  EXPECT_OK(DrainAndWait(stale, absl::Seconds(30), clock));
  EXPECT_FALSE(Exists(stale + "/drain")) << "a dead worker is not asked";
  EXPECT_EQ(clock.Now(), FakeClock().Now()) << "no wait";
  EXPECT_THAT(DrainAndWait(empty + "/missing", absl::Seconds(1), clock),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(DrainControlTest, ALiveWorkerIsAskedAndWaitedForUntilTheDeadline) {
  FakeClock clock;
  clock.set_advance_on_sleep(true);
  const std::string dir = NewDir();
  ASSERT_OK_AND_ASSIGN(DrainControl control, DrainControl::Open(dir));
  const absl::Time start = clock.Now();
  EXPECT_THAT(DrainAndWait(dir, absl::Seconds(30), clock),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("did not drain within 30s")));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(30));
  EXPECT_TRUE(control.DrainRequested());
}

TEST(DrainControlTest, ReturnsOnceTheWorkerSaysDrained) {
  FakeClock clock;
  const std::string dir = NewDir();
  ASSERT_OK_AND_ASSIGN(DrainControl control, DrainControl::Open(dir));
  absl::Status result = absl::UnknownError("not returned");
  std::thread waiter(
      [&] { result = DrainAndWait(dir, absl::Seconds(30), clock); });
  // The worker's side: once the waiter has asked and polled once (it
  // sleeps on the clock), it drains and says so; the waiter notices at its
  // next poll. Marking before the waiter sleeps let it read the clock after
  // the Advance below and sleep past it, forever.
  ASSERT_TRUE(clock.WaitForWaiters(1, absl::Seconds(30)));
  EXPECT_TRUE(control.DrainRequested());
  ASSERT_OK(control.MarkDrained());
  clock.Advance(absl::Milliseconds(100));
  waiter.join();
  EXPECT_OK(result);
}

TEST(DrainControlTest, ANodesLocalRanksAreEachDrained) {
  FakeClock clock;
  clock.set_advance_on_sleep(true);
  const std::string dir = NewDir();
  ASSERT_OK_AND_ASSIGN(DrainControl rank0, DrainControl::Open(dir + "/0"));
  ASSERT_OK_AND_ASSIGN(DrainControl rank1, DrainControl::Open(dir + "/1"));
  ASSERT_OK(rank0.MarkDrained());
  EXPECT_THAT(DrainAndWait(dir, absl::Seconds(5), clock),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr(dir + "/1 did not drain")));
  EXPECT_TRUE(rank0.DrainRequested());
  EXPECT_TRUE(rank1.DrainRequested());
  ASSERT_OK(rank1.MarkDrained());
  EXPECT_OK(DrainAndWait(dir, absl::Seconds(5), clock));
}

}  // namespace
}  // namespace pshard::worker
