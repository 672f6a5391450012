// ShmChannel: a one-way byte stream between two ranks on the same host,
// through a shared-memory ring, for the GlooCommunicator's reduce and
// broadcast transfers. On loopback TCP every byte is copied twice by the
// kernel (into and out of the socket); here the sender copies it into the
// ring once and the receiver consumes it straight from the ring (adding it
// into the gradient, or copying it into the parameters) — as NCCL's SHM
// transport does within a node.
//
// Both ends know the size of every message (the transfers of one direction
// are issued in the same order on both ranks), so the stream carries no
// framing (each message starts at the next 64-byte boundary). Waits use futexes on the shared header, always with a deadline
// measured on the channel's Clock (a FakeClock in tests: its deadline is
// noticed within one 100 ms futex slice of real time once the fake time
// passes it); Close() (either side) marks the ring closed and wakes every
// waiter.
#ifndef PSHARD_WORKER_COMM_SHM_CHANNEL_H_
#define PSHARD_WORKER_COMM_SHM_CHANNEL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace pshard::worker {

class ShmChannel {
 public:
  // Creates a new ring of `capacity` bytes (a multiple of 64) under a fresh
  // name; the sender's end. Timeouts are measured on `clock`, which must
  // outlive the channel.
  static absl::StatusOr<std::unique_ptr<ShmChannel>> Create(
      const std::string& name_hint, int64_t capacity,
      const Clock& clock = Clock::Real());
  // Opens the ring `name` created by the peer and unlinks the name (the
  // mapping stays); the receiver's end.
  static absl::StatusOr<std::unique_ptr<ShmChannel>> Open(
      const std::string& name, const Clock& clock = Clock::Real());

  ~ShmChannel();

  const std::string& name() const { return name_; }

  // Sender: appends [data, data + bytes) to the stream, waiting for room
  // (each wait bounded by `timeout`).
  absl::Status Write(const char* data, int64_t bytes, absl::Duration timeout);

  // Receiver: consumes the next `bytes` of the stream (the sender's next
  // message, which has that size), handing each contiguous piece to
  // `consume(offset_in_message, pointer, length)`; lengths are multiples of
  // `granule` (the element size) and pointers aligned to it, since every
  // message starts 64-byte aligned in the ring. InvalidArgument if `granule`
  // does not divide 64 and `bytes`.
  absl::Status Read(
      int64_t bytes, int64_t granule, absl::Duration timeout,
      const std::function<void(int64_t, const char*, int64_t)>& consume);

  // Marks the ring closed: every wait on either side fails from now on.
  void Close();

 private:
  struct Header;
  ShmChannel(std::string name, bool owner, void* base, size_t mapped,
             const Clock& clock);

  absl::Status WaitFor(std::atomic<uint32_t>* word, uint32_t seen,
                       absl::Time deadline, const char* what);

  std::string name_;
  bool owner_;
  const Clock& clock_;
  void* base_;
  size_t mapped_;
  Header* header_;
  char* ring_;
  // When a wait may next look for a zombie peer (absl::GetCurrentTimeNanos).
  std::atomic<int64_t> next_zombie_check_ns_{0};
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_SHM_CHANNEL_H_
