#include "worker/comm/fake_communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/comm/link.h"
#include "worker/comm/link_communicator.h"

namespace pshard::worker {

// A send is buffered when it is posted (as a socket buffer holds it; the
// pipeline posts a send only once its data is final), so it is done at once:
// a rank's completion thread never waits for a peer's to take its data.
class FakeHub::MemorySend : public Transfer {
 public:
  absl::Status Wait(absl::Duration) override { return absl::OkStatus(); }
  void AbortWait() override {}
};

class FakeHub::MemoryReceive : public Transfer {
 public:
  MemoryReceive(FakeHub* hub, int src, int dst, Channel* channel,
                int64_t number, int64_t bytes, const Delivery& into)
      : hub_(hub),
        src_(src),
        dst_(dst),
        channel_(channel),
        number_(number),
        bytes_(bytes),
        into_(into) {}

  absl::Status Wait(absl::Duration timeout) override {
    std::vector<char> message;
    {
      absl::MutexLock lock(&hub_->mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub_->mu_) {
        return channel_->posted.count(number_) > 0 ||
               !hub_->Failure(src_, dst_).ok();
      };
      hub_->mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
      // What was sent before the sender closed still arrives, as bytes
      // written to a socket before it closed do: a rank that finished and
      // closed its communicator does not fail its peers' last receives.
      auto it = channel_->posted.find(number_);
      if (it == channel_->posted.end()) {
        if (absl::Status failure = hub_->Failure(src_, dst_); !failure.ok()) {
          return failure;
        }
        return absl::DeadlineExceededError(absl::StrCat(
            "the peer sent nothing within ", absl::FormatDuration(timeout)));
      }
      message = std::move(it->second);
      channel_->posted.erase(it);
    }
    const int64_t sent = static_cast<int64_t>(message.size());
    if (sent != bytes_) {
      absl::Status mismatch = absl::InternalError(absl::StrCat(
          "a receive of ", bytes_, " bytes met a send of ", sent,
          ": the ranks issued different collectives"));
      hub_->Break(mismatch);
      return mismatch;
    }
    Deliver(into_, 0, message.data(), bytes_);
    return absl::OkStatus();
  }

  // The hub breaks (Break) to release waits.
  void AbortWait() override {}

 private:
  FakeHub* const hub_;
  const int src_;
  const int dst_;
  Channel* const channel_;
  const int64_t number_;
  const int64_t bytes_;
  const Delivery into_;
};

class FakeHub::MemoryLink : public Link {
 public:
  MemoryLink(FakeHub* hub, int rank, int peer)
      : hub_(hub), rank_(rank), peer_(peer) {}

  absl::StatusOr<std::unique_ptr<Transfer>> Send(const char* data,
                                                 int64_t bytes, uint64_t tag,
                                                 int lane) override {
    (void)tag;  // matched by posting order
    absl::MutexLock lock(&hub_->mu_);
    if (absl::Status failure = hub_->Failure(rank_, peer_); !failure.ok()) {
      return failure;
    }
    Channel& channel = hub_->ChannelOf(rank_, peer_, lane);
    channel.posted[channel.sends++].assign(data, data + bytes);
    return std::unique_ptr<Transfer>(new MemorySend());
  }

  absl::StatusOr<std::unique_ptr<Transfer>> Receive(int64_t bytes,
                                                    const Delivery& into,
                                                    uint64_t tag,
                                                    int lane) override {
    (void)tag;
    absl::MutexLock lock(&hub_->mu_);
    // Posted even on a broken hub: its bytes may be there already (Wait).
    Channel& channel = hub_->ChannelOf(peer_, rank_, lane);
    return std::unique_ptr<Transfer>(new MemoryReceive(
        hub_, peer_, rank_, &channel, channel.receives++, bytes, into));
  }

  // Closes all of this rank's links: the fake's links close together, as
  // Gloo's contexts do.
  void Close() override {
    hub_->CloseRank(rank_, absl::AbortedError(absl::StrCat(
                               "rank ", rank_, " closed its links")));
  }

 private:
  FakeHub* const hub_;
  const int rank_;
  const int peer_;
};

// One rank's links to every peer of the hub. Closing them (the rank aborted
// or was destroyed) fails its peers' transfers with it, with the
// communicator's reason.
class FakeHub::MemoryTransport : public Transport {
 public:
  MemoryTransport(FakeHub* hub, int rank) : hub_(hub), rank_(rank) {
    for (int r = 0; r < hub->world_size(); ++r) {
      links_.push_back(r == rank ? nullptr
                                 : std::make_unique<MemoryLink>(hub, rank, r));
    }
  }

  Link& DataLink(int peer) override { return *links_[peer]; }
  void Close(const absl::Status& reason) override {
    hub_->CloseRank(rank_, reason);
  }

 private:
  FakeHub* const hub_;
  const int rank_;
  std::vector<std::unique_ptr<MemoryLink>> links_;
};

FakeHub::FakeHub(int world_size, absl::Duration timeout)
    : world_size_(world_size), timeout_(timeout) {
  channels_.resize(static_cast<size_t>(world_size) * world_size * 2);
  closed_.resize(world_size);
}

FakeHub::~FakeHub() = default;

std::unique_ptr<Communicator> FakeHub::Create(int rank) {
  LinkCommunicatorOptions options;
  options.rank = rank;
  options.world_size = world_size_;
  options.timeout = timeout_;
  std::unique_ptr<Transport> transport;
  if (world_size_ > 1) transport = std::make_unique<MemoryTransport>(this, rank);
  return CreateLinkCommunicator(options, std::move(transport));
}

void FakeHub::Break(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  if (broken_.ok()) {
    broken_ = reason.ok() ? absl::AbortedError("hub broken") : reason;
  }
}

void FakeHub::CloseRank(int rank, const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  if (closed_[rank].ok()) {
    closed_[rank] = reason.ok() ? absl::AbortedError("rank closed") : reason;
  }
}

absl::Status FakeHub::Failure(int src, int dst) const {
  if (!broken_.ok()) return broken_;
  if (!closed_[src].ok()) return closed_[src];
  return closed_[dst];
}

FakeHub::Channel& FakeHub::ChannelOf(int src, int dst, int lane) {
  return channels_[(static_cast<size_t>(src) * world_size_ + dst) * 2 + lane];
}

}  // namespace pshard::worker
