#include "worker/comm/gloo_communicator.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/comm/link_communicator.h"
#include "worker/comm/shm_link.h"
#include "worker/comm/shm_rendezvous.h"
#include "worker/comm/tcp_link.h"

namespace pshard::worker {
namespace {

// Gloo's TCP pairs to every peer, and shared-memory rings to the peers on
// this host: data to such a peer goes through its ShmLink, everything else
// (and every barrier) through TCP.
class GlooTransport : public Transport {
 public:
  GlooTransport(std::unique_ptr<TcpTransport> tcp,
                std::vector<std::unique_ptr<ShmLink>> shm)
      : tcp_(std::move(tcp)), shm_(std::move(shm)) {}

  Link& DataLink(int peer) override {
    if (peer < static_cast<int>(shm_.size()) && shm_[peer] != nullptr) {
      return *shm_[peer];
    }
    return tcp_->link(peer);
  }
  Link& BarrierLink(int peer) override { return tcp_->link(peer); }

  // TCP and the rings tell the peers only that the link is gone.
  void Close(const absl::Status&) override {
    for (auto& link : shm_) {
      if (link != nullptr) link->Close();
    }
    tcp_->Close();
  }

 private:
  std::unique_ptr<TcpTransport> tcp_;
  std::vector<std::unique_ptr<ShmLink>> shm_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const GlooOptions& options, KvClient& kv) {
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " of world size ",
                     options.world_size, " is out of range"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be positive");
  }
  std::unique_ptr<Transport> transport;
  if (options.world_size > 1) {
    ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> tcp,
                     TcpTransport::Connect(options, kv));
    std::vector<std::unique_ptr<ShmLink>> shm;
    if (options.shared_memory) {
      ASSIGN_OR_RETURN(shm, ConnectSharedMemory(options, kv));
    }
    transport =
        std::make_unique<GlooTransport>(std::move(tcp), std::move(shm));
  }
  LinkCommunicatorOptions pipeline;
  pipeline.rank = options.rank;
  pipeline.world_size = options.world_size;
  pipeline.timeout = options.timeout;
  pipeline.max_in_flight = options.max_in_flight;
  return CreateLinkCommunicator(pipeline, std::move(transport));
}

}  // namespace pshard::worker
