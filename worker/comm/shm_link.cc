#include "worker/comm/shm_link.h"

#include <algorithm>
#include <utility>

namespace pshard::worker {
namespace {

class ShmSend : public Transfer {
 public:
  ShmSend(std::shared_ptr<CompletionWork> done, absl::Duration sender_timeout)
      : done_(std::move(done)), sender_timeout_(sender_timeout) {}

  // The sender thread bounds each of its waits by its timeout; this wait
  // only needs to outlast it.
  absl::Status Wait(absl::Duration timeout) override {
    return done_->Wait(std::max(timeout, sender_timeout_) + absl::Seconds(10));
  }

  // Closing the ring releases the sender thread, and with it this wait.
  void AbortWait() override {}

 private:
  std::shared_ptr<CompletionWork> done_;
  const absl::Duration sender_timeout_;
};

class ShmReceive : public Transfer {
 public:
  ShmReceive(ShmChannel* channel, int64_t bytes, const Delivery& into)
      : channel_(channel), bytes_(bytes), into_(into) {}

  absl::Status Wait(absl::Duration timeout) override {
    const Delivery into = into_;
    // Additions take whole elements; copies any bytes.
    const int64_t granule = into.add ? DataTypeSize(into.dtype) : 1;
    return channel_->Read(bytes_, granule, timeout,
                          [&into](int64_t offset, const char* data,
                                  int64_t length) {
                            Deliver(into, offset, data, length);
                          });
  }

  // Closing the ring releases the read.
  void AbortWait() override {}

 private:
  ShmChannel* const channel_;
  const int64_t bytes_;
  const Delivery into_;
};

}  // namespace

ShmLink::ShmLink(std::array<std::unique_ptr<ShmChannel>, kLanes> out,
                 std::array<std::unique_ptr<ShmChannel>, kLanes> in,
                 absl::Duration timeout)
    : timeout_(timeout), in_(std::move(in)) {
  for (int lane = 0; lane < kLanes; ++lane) {
    Sender& sender = out_[lane];
    sender.channel = std::move(out[lane]);
    sender.thread = std::thread([this, &sender] { SendLoop(sender); });
  }
}

ShmLink::~ShmLink() {
  Close();
  for (Sender& sender : out_) {
    {
      absl::MutexLock lock(&sender.mu);
      sender.stop = true;
    }
    sender.thread.join();
  }
}

absl::StatusOr<std::unique_ptr<Transfer>> ShmLink::Send(const char* data,
                                                        int64_t bytes,
                                                        uint64_t tag,
                                                        int lane) {
  (void)tag;  // the ring's order matches sends to receives
  auto done = std::make_shared<CompletionWork>();
  Sender& sender = out_[lane];
  {
    absl::MutexLock lock(&sender.mu);
    sender.queue.push_back({data, bytes, done});
  }
  return std::unique_ptr<Transfer>(new ShmSend(std::move(done), timeout_));
}

absl::StatusOr<std::unique_ptr<Transfer>> ShmLink::Receive(
    int64_t bytes, const Delivery& into, uint64_t tag, int lane) {
  (void)tag;
  return std::unique_ptr<Transfer>(
      new ShmReceive(in_[lane].get(), bytes, into));
}

// Wakes every ring waiter here and at the peer.
void ShmLink::Close() {
  for (Sender& sender : out_) sender.channel->Close();
  for (auto& channel : in_) channel->Close();
}

// Writes the queued sends of one ring, in order; after a failure later sends
// fail too, since they could no longer be in order.
void ShmLink::SendLoop(Sender& sender) {
  while (true) {
    QueuedSend send;
    {
      absl::MutexLock lock(&sender.mu);
      auto ready = [&sender]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sender.mu) {
        return sender.stop || !sender.queue.empty();
      };
      sender.mu.Await(absl::Condition(&ready));
      if (sender.queue.empty()) return;
      send = std::move(sender.queue.front());
      sender.queue.pop_front();
    }
    if (sender.failed.ok()) {
      sender.failed = sender.channel->Write(send.data, send.bytes, timeout_);
    }
    send.done->Complete(sender.failed);
  }
}

}  // namespace pshard::worker
