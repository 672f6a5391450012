#include "worker/comm/shm_channel.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

// Messages larger than the ring and odd sizes arrive intact and in order,
// each piece aligned for its elements: a message of bf16 elements (2 bytes)
// followed by one of floats still hands out 4-byte aligned floats, and the
// first piece of every message is 64-byte aligned.
TEST(ShmChannelTest, StreamsAlignedMessagesThroughASmallRing) {
  ASSERT_OK_AND_ASSIGN(auto writer, ShmChannel::Create("test", 256));
  ASSERT_OK_AND_ASSIGN(auto reader, ShmChannel::Open(writer->name()));
  struct Message {
    int64_t bytes;
    int64_t granule;
  };
  const std::vector<Message> messages = {
      {6, 2}, {1000, 4}, {2, 2}, {0, 4}, {4096, 4}, {10, 2}, {7, 1}, {12, 4}};
  std::vector<std::string> sent;
  for (size_t m = 0; m < messages.size(); ++m) {
    std::string message(messages[m].bytes, '\0');
    for (int64_t i = 0; i < messages[m].bytes; ++i) {
      message[i] = static_cast<char>(m * 31 + i);
    }
    sent.push_back(message);
  }
  // EXPECT, not ASSERT, off the test's thread: a failed write stops the
  // producer, and the reads below then fail on their deadline.
  std::thread producer([&] {
    for (const auto& message : sent) {
      absl::Status status =
          writer->Write(message.data(), message.size(), absl::Seconds(10));
      EXPECT_OK(status);
      if (!status.ok()) return;
    }
  });
  for (size_t m = 0; m < messages.size(); ++m) {
    const int64_t granule = messages[m].granule;
    std::string received(messages[m].bytes, '?');
    ASSERT_OK(reader->Read(
        messages[m].bytes, granule, absl::Seconds(10),
        [&](int64_t offset, const char* data, int64_t n) {
          const auto address = reinterpret_cast<uintptr_t>(data);
          EXPECT_EQ(n % granule, 0) << "message " << m;
          EXPECT_EQ(address % granule, 0u) << "message " << m;
          if (offset == 0) {
            EXPECT_EQ(address % 64, 0u) << "message " << m;
          }
          received.replace(offset, n, data, n);
        }));
    EXPECT_EQ(received, sent[m]) << "message " << m;
  }
  producer.join();
}

TEST(ShmChannelTest, ReadOfPartialElementsIsRefused) {
  ASSERT_OK_AND_ASSIGN(auto writer, ShmChannel::Create("test", 256));
  ASSERT_OK_AND_ASSIGN(auto reader, ShmChannel::Open(writer->name()));
  const auto ignore = [](int64_t, const char*, int64_t) {};
  EXPECT_THAT(reader->Read(6, 4, absl::Seconds(1), ignore),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("6 bytes in elements of 4")));
  EXPECT_THAT(reader->Read(24, 24, absl::Seconds(1), ignore),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("must divide 64")));
}

TEST(ShmChannelTest, ReaderTimesOutWithoutData) {
  ASSERT_OK_AND_ASSIGN(auto writer, ShmChannel::Create("test", 64));
  ASSERT_OK_AND_ASSIGN(auto reader, ShmChannel::Open(writer->name()));
  EXPECT_THAT(reader->Read(4, 4, absl::Milliseconds(200),
                           [](int64_t, const char*, int64_t) {}),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

// Advances `clock` by `step` until `done` is notified; each advance passes
// any deadline `step` away that was set before it, so a wait that started
// late is caught by the next one. Bounded in real time.
bool AdvanceUntil(FakeClock& clock, absl::Duration step,
                  absl::Notification& done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    if (absl::Now() > give_up) return false;
    clock.Advance(step);
  }
  return true;
}

// Timeouts run on the injected clock: a reader with a 1 ms timeout still
// waits while the fake time stands still (on the real clock it would have
// failed at once), and fails with DeadlineExceeded once the fake time passes
// its deadline, without that time passing for real.
TEST(ShmChannelTest, ReaderDeadlineIsMeasuredOnTheInjectedClock) {
  FakeClock clock;
  ASSERT_OK_AND_ASSIGN(auto writer, ShmChannel::Create("test", 64, clock));
  ASSERT_OK_AND_ASSIGN(auto reader, ShmChannel::Open(writer->name(), clock));
  absl::Status status;
  absl::Notification done;
  std::thread waiter([&] {
    status = reader->Read(4, 4, absl::Milliseconds(1),
                          [](int64_t, const char*, int64_t) {});
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
      << "the read timed out on the real clock: " << status;
  EXPECT_TRUE(AdvanceUntil(clock, absl::Milliseconds(2), done));
  waiter.join();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                               ::testing::HasSubstr("send data")));
}

// The same for a writer waiting for room in a full ring, with an hour's
// timeout that the fake clock passes in a few steps.
TEST(ShmChannelTest, WriterDeadlineIsMeasuredOnTheInjectedClock) {
  FakeClock clock;
  ASSERT_OK_AND_ASSIGN(auto writer, ShmChannel::Create("test", 64, clock));
  ASSERT_OK_AND_ASSIGN(auto reader, ShmChannel::Open(writer->name(), clock));
  const absl::Time start = absl::Now();
  absl::Status status;
  absl::Notification done;
  std::thread waiter([&] {
    std::vector<char> twice_the_ring(128);
    status = writer->Write(twice_the_ring.data(), twice_the_ring.size(),
                           absl::Hours(1));
    done.Notify();
  });
  EXPECT_TRUE(AdvanceUntil(clock, absl::Hours(1) + absl::Seconds(1), done));
  waiter.join();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                               ::testing::HasSubstr("make room")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

// A writer that waits for room is released by the reader's Close, long
// before its own deadline. The closer first consumes one ring's worth: once
// that arrived the writer is inside Write with most of its message left, so
// it either already waits or will find the ring closed at its next wait —
// no sleep needed to line the two up.
TEST(ShmChannelTest, CloseReleasesAWaitingWriter) {
  ASSERT_OK_AND_ASSIGN(auto writer, ShmChannel::Create("test", 64));
  ASSERT_OK_AND_ASSIGN(auto reader, ShmChannel::Open(writer->name()));
  absl::Status first_read;
  std::thread closer([&] {
    first_read = reader->Read(64, 1, absl::Seconds(10),
                              [](int64_t, const char*, int64_t) {});
    reader->Close();
  });
  const absl::Time start = absl::Now();
  std::vector<char> big(1024);
  EXPECT_THAT(writer->Write(big.data(), big.size(), absl::Seconds(30)),
              StatusIs(absl::StatusCode::kAborted, ::testing::_));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  closer.join();
  EXPECT_OK(first_read);
}

// The other side: a reader waiting for data is released by the writer's
// Close. The writer sends 1 of the 8 bytes the reader expects, then closes:
// whichever comes first, the reader ends with the close, not its deadline.
TEST(ShmChannelTest, CloseReleasesAWaitingReader) {
  ASSERT_OK_AND_ASSIGN(auto writer, ShmChannel::Create("test", 64));
  ASSERT_OK_AND_ASSIGN(auto reader, ShmChannel::Open(writer->name()));
  std::thread closer([&] {
    const char byte = 1;
    EXPECT_OK(writer->Write(&byte, 1, absl::Seconds(10)));
    writer->Close();
  });
  const absl::Time start = absl::Now();
  // 1 byte arrives, the other 7 never do: the read ends at the close.
  EXPECT_THAT(reader->Read(8, 1, absl::Seconds(30),
                           [](int64_t, const char*, int64_t) {}),
              StatusIs(absl::StatusCode::kAborted, ::testing::_));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  closer.join();
}

// A child process that creates a ring and dies without writing or closing
// it (no destructor: the name stays). Returns its pid and the ring's name.
absl::StatusOr<std::pair<pid_t, std::string>> ForkADyingWriter() {
  int pipefd[2];
  if (pipe(pipefd) != 0) return absl::InternalError("pipe");
  const pid_t child = fork();
  if (child < 0) return absl::InternalError("fork");
  if (child == 0) {
    auto ring = ShmChannel::Create("child", 64);
    std::string name = ring.ok() ? (*ring)->name() : "";
    (void)!write(pipefd[1], name.c_str(), name.size() + 1);
    _exit(0);
  }
  char name[256] = {0};
  const ssize_t n = read(pipefd[0], name, sizeof(name) - 1);
  close(pipefd[0]);
  close(pipefd[1]);
  if (n <= 0 || name[0] == '\0') return absl::InternalError("no ring name");
  return std::make_pair(child, std::string(name));
}

void ExpectTheReaderSeesItGone(const std::string& name) {
  ASSERT_OK_AND_ASSIGN(auto reader, ShmChannel::Open(name));
  EXPECT_THAT(reader->Read(4, 4, absl::Seconds(30),
                           [](int64_t, const char*, int64_t) {}),
              StatusIs(absl::StatusCode::kUnavailable,
                       ::testing::HasSubstr("is gone")));
}

TEST(ShmChannelTest, NoticesADeadWriterProcess) {
  ASSERT_OK_AND_ASSIGN(const auto writer, ForkADyingWriter());
  int status;
  waitpid(writer.first, &status, 0);
  ExpectTheReaderSeesItGone(writer.second);
}

// The same while the dead writer is not reaped yet (a zombie).
TEST(ShmChannelTest, NoticesADeadWriterProcessBeforeItIsReaped) {
  ASSERT_OK_AND_ASSIGN(const auto writer, ForkADyingWriter());
  // Until it has exited, but left unreaped (WNOWAIT).
  siginfo_t info;
  ASSERT_EQ(waitid(P_PID, writer.first, &info, WEXITED | WNOWAIT), 0);
  ExpectTheReaderSeesItGone(writer.second);
  int status;
  waitpid(writer.first, &status, 0);
}

TEST(ShmChannelTest, OpenRejectsUnknownName) {
  EXPECT_FALSE(ShmChannel::Open("/pshard-does-not-exist").ok());
}

}  // namespace
}  // namespace pshard::worker
