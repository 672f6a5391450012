#include "worker/comm/tcp_link.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/open_files.h"
#include "common/status_macros.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/transport/context.h"
#include "gloo/transport/device.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/address.h"
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

// A gloo::Context over pairs connected here (ConnectMesh) rather than by
// gloo::rendezvous::Context::connectFullMesh.
class MeshContext : public ::gloo::Context {
 public:
  MeshContext(int rank, int size,
              std::shared_ptr<::gloo::transport::Device> device,
              std::shared_ptr<::gloo::transport::Context> transport)
      : ::gloo::Context(rank, size) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// What a rank publishes for the TCP rendezvous: the address its pairs
// listen on (each pair has a socket of its own) and, in rank order, the port
// of its pair for each peer. Gloo's connectFullMesh publishes every pair's
// whole address instead (about 250 bytes a pair against 2 here) and every
// peer reads them all. Both read O(n^2) bytes per rank, this with a far
// smaller constant: 20 times fewer bytes at 12 ranks (communicator_test
// TcpRendezvousIsASmallRecordPerRank), tending to about 125 times.
struct MeshRecord {
  sockaddr_storage host;  // the port is each pair's
  std::vector<uint16_t> ports;  // network order, by peer, self skipped

  std::string Encode() const {
    std::string out(reinterpret_cast<const char*>(&host), sizeof(host));
    out.append(reinterpret_cast<const char*>(ports.data()),
               ports.size() * sizeof(uint16_t));
    return out;
  }
  static absl::StatusOr<MeshRecord> Decode(const std::string& bytes,
                                           int world_size, int peer) {
    const size_t want = sizeof(sockaddr_storage) +
                        static_cast<size_t>(world_size - 1) * sizeof(uint16_t);
    if (bytes.size() != want) {
      return absl::DataLossError(
          absl::StrCat("rank ", peer, "'s rendezvous record is ", bytes.size(),
                       " bytes, not ", want));
    }
    MeshRecord record;
    std::memcpy(&record.host, bytes.data(), sizeof(record.host));
    if (record.host.ss_family != AF_INET && record.host.ss_family != AF_INET6) {
      return absl::DataLossError(
          absl::StrCat("rank ", peer, "'s rendezvous record has address family ",
                       record.host.ss_family, ", not IPv4 or IPv6"));
    }
    record.ports.resize(world_size - 1);
    std::memcpy(record.ports.data(), bytes.data() + sizeof(record.host),
                record.ports.size() * sizeof(uint16_t));
    return record;
  }
};

// The port of a TCP/IP socket address; nullptr for other families.
uint16_t* PortOf(sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    return &reinterpret_cast<sockaddr_in*>(&address)->sin_port;
  }
  if (address.ss_family == AF_INET6) {
    return &reinterpret_cast<sockaddr_in6*>(&address)->sin6_port;
  }
  return nullptr;
}

// Whether two TCP/IP socket addresses name the same host (family and
// address; ports aside).
bool SameHost(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(&a)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(&b)->sin_addr,
                       sizeof(in_addr)) == 0;
  }
  const auto& a6 = reinterpret_cast<const sockaddr_in6&>(a);
  const auto& b6 = reinterpret_cast<const sockaddr_in6&>(b);
  return std::memcmp(&a6.sin6_addr, &b6.sin6_addr, sizeof(in6_addr)) == 0 &&
         a6.sin6_scope_id == b6.sin6_scope_id;
}

std::string MeshKey(const std::string& prefix, int rank) {
  return absl::StrCat(prefix, "mesh/", rank);
}

// Connects a full mesh of TCP pairs on a fresh device: one MeshRecord per
// rank through `kv`, then each pair to its peer's.
absl::StatusOr<std::shared_ptr<::gloo::Context>> ConnectMesh(
    const GlooOptions& options, KvClient& kv, const std::string& prefix,
    const GlooWait& wait) {
  using ::gloo::transport::tcp::Address;
  const int rank = options.rank;
  const int n = options.world_size;
  ::gloo::transport::tcp::attr attr;
  attr.hostname = options.hostname;
  // A device per context: its own event loop thread.
  std::shared_ptr<::gloo::transport::Device> device =
      ::gloo::transport::tcp::CreateDevice(attr);
  std::shared_ptr<::gloo::transport::Context> transport =
      device->createContext(rank, n);
  transport->setTimeout(wait.timeout());
  MeshRecord mine{};
  for (int peer = 0; peer < n; ++peer) {
    if (peer == rank) continue;
    // Only the family's own struct: the rest of the storage is not the
    // address's and is published as zeros.
    const Address pair_address(transport->createPair(peer)->address().bytes());
    const sockaddr_storage& bound = pair_address.getSockaddr();
    sockaddr_storage listening{};
    std::memcpy(&listening, &bound,
                bound.ss_family == AF_INET6 ? sizeof(sockaddr_in6)
                                            : sizeof(sockaddr_in));
    uint16_t* port = PortOf(listening);
    if (port == nullptr) {
      return absl::InternalError(absl::StrCat(
          "rank ", rank, "'s pair for rank ", peer,
          " listens on an address of family ", listening.ss_family,
          ", not IPv4 or IPv6"));
    }
    mine.ports.push_back(*port);
    *port = 0;
    if (mine.ports.size() == 1) {
      mine.host = listening;
    } else if (!SameHost(listening, mine.host)) {
      return absl::InternalError(absl::StrCat(
          "rank ", rank, "'s pairs listen on different addresses"));
    }
  }
  RETURN_IF_ERROR(kv.Put(MeshKey(prefix, rank), mine.Encode()));
  ASSIGN_OR_RETURN(
      std::vector<std::string> records,
      GetFromEveryPeer(
          kv, n, rank, [&](int peer) { return MeshKey(prefix, peer); },
          options.timeout));
  for (int peer = 0; peer < n; ++peer) {
    if (peer == rank) continue;
    ASSIGN_OR_RETURN(MeshRecord theirs,
                     MeshRecord::Decode(records[peer], n, peer));
    // The peer's pair for this rank: its ports skip the peer itself.
    *PortOf(theirs.host) = theirs.ports[rank < peer ? rank : rank - 1];
    transport->getPair(peer)->connect(Address(theirs.host).bytes());
  }
  auto context = std::make_shared<MeshContext>(rank, n, std::move(device),
                                               std::move(transport));
  context->setTimeout(wait.timeout());
  return context;
}

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
  const GlooWait wait(options.timeout);
  RETURN_IF_ERROR(CheckOpenFileHeadroom(
      int64_t{kTcpMeshFilesPerPeer} * (options.world_size - 1) +
          kTcpMeshFilesPerRank,
      absl::StrCat("rank ", options.rank, "'s TCP mesh of ",
                   options.world_size, " ranks")));
  try {
    // Each context through the store. (Gloo's ContextFactory would send the
    // second context's addresses over the first's pairs, but its pairs took
    // seconds per transfer in this Gloo.)
    for (int c = 0; c < 2; ++c) {
      absl::StatusOr<std::shared_ptr<::gloo::Context>> context = ConnectMesh(
          options, kv, absl::StrCat(options.key_prefix, c, "/"), wait);
      if (!context.ok()) {
        return absl::Status(context.status().code(),
                            absl::StrCat("rendezvous of rank ", options.rank,
                                         " of ", options.world_size, ": ",
                                         context.status().message()));
      }
      contexts[c] = *std::move(context);
    }
  } catch (const std::exception& e) {
    return wait.ToStatus(
        e, absl::StrCat("connecting rank ", options.rank, " of ",
                        options.world_size, " (listening on ",
                        options.hostname, ")"));
  }
  return std::unique_ptr<TcpTransport>(
      new TcpTransport(options.rank, std::move(contexts)));
}

}  // namespace pshard::worker
