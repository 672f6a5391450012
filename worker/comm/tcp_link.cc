#include "worker/comm/tcp_link.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace pshard::worker {
namespace {

using ::gloo::transport::UnboundBuffer;

// Our slots live in their own range so they never meet Gloo's own
// collectives' slots (which use small prefixes in the top byte).
constexpr uint64_t kSlotPrefix = uint64_t{0x5d} << 56;

uint64_t SlotOf(uint64_t tag, int lane) {
  return kSlotPrefix | (tag << 2) | static_cast<uint64_t>(lane);
}

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Posting (as opposed to waiting) has no deadline: what it throws is a
// transport error.
absl::Status PostingError(const std::exception& e) {
  return absl::UnavailableError(e.what());
}

// gloo::rendezvous::Store over a KvClient. Gloo expects failures as
// exceptions; Connect catches them and reports the store's own status.
class KvGlooStore : public ::gloo::rendezvous::Store {
 public:
  KvGlooStore(KvClient& kv, std::string prefix, absl::Duration timeout)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status status =
        kv_.Put(prefix_ + key, std::string(data.begin(), data.end()));
    if (!status.ok()) Throw(status);
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = kv_.Get(prefix_ + key, timeout_);
    if (!value.ok()) Throw(value.status());
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, ToChrono(timeout_));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    absl::Duration limit =
        std::min(timeout_, absl::Milliseconds(timeout.count()));
    if (timeout.count() <= 0) limit = timeout_;
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> value = kv_.Get(prefix_ + key, limit);
      if (!value.ok()) Throw(value.status());
    }
  }

  // The store's own failure, if Gloo failed because of one.
  const absl::Status& error() const { return error_; }

 private:
  [[noreturn]] void Throw(const absl::Status& status) {
    error_ = status;
    throw ::gloo::IoException(status.ToString());
  }

  KvClient& kv_;
  const std::string prefix_;
  const absl::Duration timeout_;
  absl::Status error_;
};

// A send or receive on an unbound buffer. A receive that adds lands in
// scratch first and is summed into its destination once it has arrived.
class TcpTransfer : public Transfer {
 public:
  TcpTransfer(bool send, int64_t bytes, const Delivery& into,
              TcpTransport::ScratchPool* pool)
      : send_(send), bytes_(bytes), into_(into), pool_(pool) {}

  ~TcpTransfer() override {
    // Only reached once the buffer is finished or its connection closed.
    buffer_.reset();
    if (scratch_ != nullptr) pool_->Release(bytes_, std::move(scratch_));
  }

  // Where the transport reads or writes.
  char* PrepareReceive() {
    if (!into_.add) return into_.dst;
    scratch_ = pool_->Acquire(bytes_);
    return scratch_.get();
  }

  void set_buffer(std::unique_ptr<UnboundBuffer> buffer) {
    buffer_ = std::move(buffer);
  }
  UnboundBuffer& buffer() { return *buffer_; }

  absl::Status Wait(absl::Duration timeout) override {
    const GlooWait wait(timeout);
    try {
      const bool done = send_ ? buffer_->waitSend(wait.timeout())
                              : buffer_->waitRecv(wait.timeout());
      if (!done) return absl::AbortedError("transfer aborted");
    } catch (const std::exception& e) {
      return wait.ToStatus(e, send_ ? "send" : "receive");
    }
    if (scratch_ != nullptr) {
      Deliver(into_, 0, scratch_.get(), bytes_);
      pool_->Release(bytes_, std::move(scratch_));
    }
    return absl::OkStatus();
  }

  void AbortWait() override {
    send_ ? buffer_->abortWaitSend() : buffer_->abortWaitRecv();
  }

 private:
  const bool send_;
  const int64_t bytes_;
  const Delivery into_;
  TcpTransport::ScratchPool* const pool_;
  std::unique_ptr<char[]> scratch_;
  std::unique_ptr<UnboundBuffer> buffer_;
};

}  // namespace

GlooWait::GlooWait(absl::Duration timeout)
    : timeout_(ToChrono(timeout)),
      deadline_(std::chrono::steady_clock::now() + timeout_) {}

absl::Status GlooWait::ToStatus(const std::exception& e,
                                absl::string_view what) const {
  std::string message = absl::StrCat(what, ": ", e.what());
  if (std::chrono::steady_clock::now() >= deadline_) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

std::unique_ptr<char[]> TcpTransport::ScratchPool::Acquire(size_t bytes) {
  absl::MutexLock lock(&mu_);
  auto& free = free_[bytes];
  if (!free.empty()) {
    std::unique_ptr<char[]> buffer = std::move(free.back());
    free.pop_back();
    return buffer;
  }
  return std::unique_ptr<char[]>(new char[std::max<size_t>(bytes, 1)]);
}

void TcpTransport::ScratchPool::Release(size_t bytes,
                                        std::unique_ptr<char[]> buffer) {
  absl::MutexLock lock(&mu_);
  auto& free = free_[bytes];
  if (free.size() < 32) free.push_back(std::move(buffer));
}

class TcpTransport::TcpLink : public Link {
 public:
  TcpLink(TcpTransport* transport, int peer)
      : transport_(transport), peer_(peer) {}

  absl::StatusOr<std::unique_ptr<Transfer>> Send(const char* data,
                                                 int64_t bytes, uint64_t tag,
                                                 int lane) override {
    auto t = std::make_unique<TcpTransfer>(/*send=*/true, bytes, Delivery{},
                                           &transport_->pool_);
    try {
      // Gloo's buffers are not const, but a send only reads.
      t->set_buffer(transport_->ContextFor(transport_->rank_, peer_)
                        .createUnboundBuffer(const_cast<char*>(data), bytes));
      t->buffer().send(peer_, SlotOf(tag, lane));
    } catch (const std::exception& e) {
      return PostingError(e);
    }
    return t;
  }

  absl::StatusOr<std::unique_ptr<Transfer>> Receive(int64_t bytes,
                                                    const Delivery& into,
                                                    uint64_t tag,
                                                    int lane) override {
    auto t = std::make_unique<TcpTransfer>(/*send=*/false, bytes, into,
                                           &transport_->pool_);
    try {
      t->set_buffer(transport_->ContextFor(peer_, transport_->rank_)
                        .createUnboundBuffer(t->PrepareReceive(), bytes));
      t->buffer().recv(peer_, SlotOf(tag, lane));
    } catch (const std::exception& e) {
      return PostingError(e);
    }
    return t;
  }

  // Gloo closes a context's connections all at once.
  void Close() override { transport_->Close(); }

 private:
  TcpTransport* const transport_;
  const int peer_;
};

TcpTransport::TcpTransport(
    int rank, std::array<std::shared_ptr<::gloo::Context>, 2> contexts)
    : rank_(rank), contexts_(std::move(contexts)) {
  const int n = contexts_[0]->size;
  links_.resize(n);
  for (int r = 0; r < n; ++r) {
    if (r != rank_) links_[r] = std::make_unique<TcpLink>(this, r);
  }
}

TcpTransport::~TcpTransport() { Close(); }

Link& TcpTransport::link(int peer) { return *links_[peer]; }

void TcpTransport::Close() {
  absl::MutexLock lock(&close_mu_);
  if (closed_) return;
  closed_ = true;
  for (auto& context : contexts_) {
    if (context == nullptr) continue;
    try {
      context->closeConnections();
    } catch (const std::exception&) {
      // Already broken: nothing more to close.
    }
  }
}

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Connect(
    const GlooOptions& options, KvClient& kv) {
  std::array<std::shared_ptr<::gloo::Context>, 2> contexts;
  for (int c = 0; c < 2; ++c) {
    const GlooWait wait(options.timeout);
    KvGlooStore store(kv, absl::StrCat(options.key_prefix, c, "/"),
                      options.timeout);
    try {
      ::gloo::transport::tcp::attr attr;
      attr.hostname = options.hostname;
      // A device per context: its own event loop thread.
      auto device = ::gloo::transport::tcp::CreateDevice(attr);
      auto rendezvous = std::make_shared<::gloo::rendezvous::Context>(
          options.rank, options.world_size);
      rendezvous->setTimeout(wait.timeout());
      rendezvous->connectFullMesh(store, device);
      contexts[c] = std::move(rendezvous);
    } catch (const std::exception& e) {
      if (!store.error().ok()) {
        return absl::Status(
            store.error().code(),
            absl::StrCat("rendezvous of rank ", options.rank, " of ",
                         options.world_size, ": ", store.error().message()));
      }
      return wait.ToStatus(
          e, absl::StrCat("connecting rank ", options.rank, " of ",
                          options.world_size, " (listening on ",
                          options.hostname, ")"));
    }
  }
  return std::unique_ptr<TcpTransport>(
      new TcpTransport(options.rank, std::move(contexts)));
}

}  // namespace pshard::worker
