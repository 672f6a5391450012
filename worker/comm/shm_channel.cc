#include "worker/comm/shm_channel.h"

#include <fcntl.h>
#include <signal.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pshard::worker {

struct ShmChannel::Header {
  uint64_t magic;
  uint64_t capacity;
  alignas(64) std::atomic<uint64_t> head;   // bytes written (sender)
  alignas(64) std::atomic<uint64_t> tail;   // bytes consumed (receiver)
  alignas(64) std::atomic<uint32_t> data_seq;   // bumped after each write
  std::atomic<uint32_t> space_seq;              // bumped after each read
  std::atomic<uint32_t> closed;
  // The two processes, so that each side notices when the other is gone
  // (killed without closing the ring).
  std::atomic<int32_t> writer_pid;
  std::atomic<int32_t> reader_pid;
};

namespace {

constexpr uint64_t kMagic = 0x70736861726452ull;  // "pshardR"
constexpr size_t kHeaderBytes = 256;

// Every message starts at a multiple of this in the stream, and so in the
// ring (its capacity is a multiple of 64, and it starts 64-aligned): the
// reader hands out pointers into the ring as typed elements, which must be
// aligned for their type (a bf16 message of 6 bytes would otherwise put the
// next message's floats at an address of 2 mod 4), and no element straddles
// the ring's end. Both ends skip the same padding: they see the same messages
// in the same order.
constexpr uint64_t kMessageAlignment = 64;
static_assert(kHeaderBytes % kMessageAlignment == 0);

uint64_t PaddingBefore(uint64_t position) {
  return (kMessageAlignment - position % kMessageAlignment) % kMessageAlignment;
}

static_assert(sizeof(std::atomic<uint32_t>) == 4, "futex words are 32-bit");

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX,
          nullptr, nullptr, 0);
}

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Whether process `pid`, which exists, has exited and waits to be reaped (a
// zombie: its parent, a test runner or an agent, may reap it only after
// this side's wait has failed).
bool IsZombie(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (comm) S ...": the state follows the last ')' (comm may hold any).
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

// How often a wait looks for a zombie peer (reading /proc costs a file
// open; kill(pid, 0) at every wait costs a syscall).
constexpr int64_t kZombieCheckIntervalNs = 100'000'000;

}  // namespace

absl::StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Create(
    const std::string& name_hint, int64_t capacity, const Clock& clock) {
  if (capacity <= 0 || capacity % 64 != 0) {
    return absl::InvalidArgumentError("ring capacity must be a multiple of 64");
  }
  std::random_device random;
  const std::string name = absl::StrFormat("/pshard-%s-%d-%08x%08x", name_hint,
                                           getpid(), random(), random());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open ", name));
  const size_t mapped = kHeaderBytes + static_cast<size_t>(capacity);
  // Reserve the pages now: a /dev/shm too small for the ring (a container's
  // default 64 MiB) must fail here, not with SIGBUS on first touch.
  const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(mapped));
  if (reserved != 0) errno = reserved;
  if (reserved != 0 || ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    absl::Status status = Errno(absl::StrCat("reserving ", mapped,
                                             " bytes of shared memory for ",
                                             name));
    close(fd);
    shm_unlink(name.c_str());
    return status;
  }
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    absl::Status status = Errno(absl::StrCat("mmap ", name));
    shm_unlink(name.c_str());
    return status;
  }
  Header* header = new (base) Header();
  header->capacity = static_cast<uint64_t>(capacity);
  header->head = 0;
  header->tail = 0;
  header->data_seq = 0;
  header->space_seq = 0;
  header->closed = 0;
  header->writer_pid = getpid();
  header->reader_pid = 0;
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kMagic;
  return std::unique_ptr<ShmChannel>(
      new ShmChannel(name, true, base, mapped, clock));
}

absl::StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Open(
    const std::string& name, const Clock& clock) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open ", name));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kHeaderBytes)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(name, " is not a ring"));
  }
  const size_t mapped = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  // The name has served its purpose: both ends have it mapped.
  shm_unlink(name.c_str());
  if (base == MAP_FAILED) return Errno(absl::StrCat("mmap ", name));
  auto* header = static_cast<Header*>(base);
  if (header->magic != kMagic ||
      header->capacity + kHeaderBytes != mapped) {
    munmap(base, mapped);
    return absl::InvalidArgumentError(absl::StrCat(name, " is not a ring"));
  }
  header->reader_pid.store(getpid());
  return std::unique_ptr<ShmChannel>(
      new ShmChannel(name, false, base, mapped, clock));
}

ShmChannel::ShmChannel(std::string name, bool owner, void* base, size_t mapped,
                       const Clock& clock)
    : name_(std::move(name)),
      owner_(owner),
      clock_(clock),
      base_(base),
      mapped_(mapped),
      header_(static_cast<Header*>(base)),
      ring_(static_cast<char*>(base) + kHeaderBytes) {}

ShmChannel::~ShmChannel() {
  Close();
  if (owner_) shm_unlink(name_.c_str());  // in case the peer never opened it
  munmap(base_, mapped_);
}

void ShmChannel::Close() {
  header_->closed.store(1);
  header_->data_seq.fetch_add(1);
  header_->space_seq.fetch_add(1);
  FutexWake(&header_->data_seq);
  FutexWake(&header_->space_seq);
}

absl::Status ShmChannel::WaitFor(std::atomic<uint32_t>* word, uint32_t seen,
                                 absl::Time deadline, const char* what) {
  if (header_->closed.load()) {
    return absl::AbortedError("shared-memory channel closed");
  }
  const int32_t peer =
      owner_ ? header_->reader_pid.load() : header_->writer_pid.load();
  bool gone = false;
  if (peer > 0) {
    gone = kill(peer, 0) != 0 && errno == ESRCH;
    const int64_t now_ns = absl::GetCurrentTimeNanos();
    if (!gone && now_ns >= next_zombie_check_ns_.load()) {
      next_zombie_check_ns_.store(now_ns + kZombieCheckIntervalNs);
      gone = IsZombie(peer);
    }
  }
  if (gone) {
    return absl::UnavailableError(absl::StrCat(
        "the peer process (pid ", peer, ") at the other end of ", name_,
        " is gone"));
  }
  const absl::Duration left = deadline - clock_.Now();
  if (left <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError(
        absl::StrCat("timed out waiting for the peer to ", what));
  }
  // Sleep at most 100 ms (real time) at a time: a peer that dies without
  // closing the ring, or a deadline passed on an injected clock, is noticed
  // within one slice; an abort at once (Close wakes us).
  const absl::Duration slice = std::min(left, absl::Milliseconds(100));
  struct timespec ts = absl::ToTimespec(slice);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts,
          nullptr, 0);
  return absl::OkStatus();
}

absl::Status ShmChannel::Write(const char* data, int64_t bytes,
                               absl::Duration timeout) {
  const uint64_t capacity = header_->capacity;
  absl::Time deadline = clock_.Now() + timeout;
  uint64_t padding =
      PaddingBefore(header_->head.load(std::memory_order_relaxed));
  int64_t done = 0;
  while (padding > 0 || done < bytes) {
    if (header_->closed.load()) {
      return absl::AbortedError("shared-memory channel closed");
    }
    const uint32_t seen = header_->space_seq.load(std::memory_order_acquire);
    uint64_t head = header_->head.load(std::memory_order_relaxed);
    const uint64_t tail = header_->tail.load(std::memory_order_acquire);
    uint64_t room = capacity - (head - tail);
    if (room == 0) {
      if (absl::Status s = WaitFor(&header_->space_seq, seen, deadline,
                                   "make room in the ring");
          !s.ok()) {
        return s;
      }
      continue;
    }
    const uint64_t skipped = std::min(room, padding);
    padding -= skipped;
    head += skipped;
    room -= skipped;
    const uint64_t at = head % capacity;
    const int64_t n = static_cast<int64_t>(
        std::min<uint64_t>({room, capacity - at,
                            static_cast<uint64_t>(bytes - done)}));
    if (n > 0) std::memcpy(ring_ + at, data + done, n);
    header_->head.store(head + n, std::memory_order_release);
    header_->data_seq.fetch_add(1, std::memory_order_release);
    FutexWake(&header_->data_seq);
    done += n;
    deadline = clock_.Now() + timeout;  // progress resets the deadline
  }
  return absl::OkStatus();
}

absl::Status ShmChannel::Read(
    int64_t bytes, int64_t granule, absl::Duration timeout,
    const std::function<void(int64_t, const char*, int64_t)>& consume) {
  if (granule <= 0 || kMessageAlignment % granule != 0 || bytes < 0 ||
      bytes % granule != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-memory read of ", bytes, " bytes in elements of ", granule,
        ": the element size must divide ", kMessageAlignment,
        " and the message size"));
  }
  const uint64_t capacity = header_->capacity;
  absl::Time deadline = clock_.Now() + timeout;
  uint64_t padding =
      PaddingBefore(header_->tail.load(std::memory_order_relaxed));
  int64_t done = 0;
  while (padding > 0 || done < bytes) {
    const uint32_t seen = header_->data_seq.load(std::memory_order_acquire);
    uint64_t tail = header_->tail.load(std::memory_order_relaxed);
    const uint64_t head = header_->head.load(std::memory_order_acquire);
    const uint64_t skipped = std::min(head - tail, padding);
    padding -= skipped;
    tail += skipped;
    const uint64_t at = tail % capacity;
    uint64_t n = std::min<uint64_t>({head - tail, capacity - at,
                                     static_cast<uint64_t>(bytes - done)});
    n -= n % granule;  // whole elements only
    if (n == 0 && skipped == 0) {
      if (absl::Status s =
              WaitFor(&header_->data_seq, seen, deadline, "send data");
          !s.ok()) {
        return s;
      }
      continue;
    }
    if (n > 0) consume(done, ring_ + at, static_cast<int64_t>(n));
    header_->tail.store(tail + n, std::memory_order_release);
    header_->space_seq.fetch_add(1, std::memory_order_release);
    FutexWake(&header_->space_seq);
    done += static_cast<int64_t>(n);
    deadline = clock_.Now() + timeout;
  }
  return absl::OkStatus();
}

}  // namespace pshard::worker
