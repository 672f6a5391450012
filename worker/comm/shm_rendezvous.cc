#include "worker/comm/shm_rendezvous.h"

#include <unistd.h>

#include <array>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::worker {

std::string HostIdentity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(in, boot_id);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(boot_id, "/", host);
}

absl::StatusOr<std::vector<std::unique_ptr<ShmLink>>> ConnectSharedMemory(
    const GlooOptions& options, KvClient& kv) {
  constexpr int kLanes = ShmLink::kLanes;
  using Rings = std::array<std::unique_ptr<ShmChannel>, kLanes>;
  const std::string prefix = absl::StrCat(options.key_prefix, "shm/");
  const int me = options.rank;
  const int n = options.world_size;
  const std::string identity = HostIdentity();
  RETURN_IF_ERROR(kv.Put(absl::StrCat(prefix, "host/", me), identity));
  ASSIGN_OR_RETURN(
      std::vector<std::string> hosts,
      GetFromEveryPeer(
          kv, n, me, [&](int r) { return absl::StrCat(prefix, "host/", r); },
          options.timeout));
  // The peers on this host, in rank order.
  std::vector<int> peers;
  for (int r = 0; r < n; ++r) {
    if (r != me && hosts[r] == identity) peers.push_back(r);
  }
  std::vector<Rings> out(n);
  std::vector<Rings> in(n);
  std::vector<std::string> ring_keys;
  std::vector<std::string> opened_keys;
  for (int r : peers) {
    for (int k = 0; k < kLanes; ++k) {
      absl::StatusOr<std::unique_ptr<ShmChannel>> ring = ShmChannel::Create(
          absl::StrCat(me, "to", r, "r", k), options.shm_ring_bytes,
          *options.clock);
      std::string name;
      if (ring.ok()) {
        name = (*ring)->name();
        out[r][k] = *std::move(ring);
      }
      RETURN_IF_ERROR(
          kv.Put(absl::StrCat(prefix, "ring/", me, "/", r, "/", k), name));
      ring_keys.push_back(absl::StrCat(prefix, "ring/", r, "/", me, "/", k));
    }
    opened_keys.push_back(absl::StrCat(prefix, "opened/", me, "/", r));
  }
  // Every rank puts all its ring names (then all it opened) before it reads
  // the others': each phase is one read.
  ASSIGN_OR_RETURN(std::vector<std::string> ring_names,
                   kv.GetMany(ring_keys, options.timeout));
  std::vector<bool> opened(n, false);
  for (size_t p = 0; p < peers.size(); ++p) {
    const int r = peers[p];
    opened[r] = true;
    for (int k = 0; k < kLanes; ++k) {
      const std::string& name = ring_names[p * kLanes + k];
      absl::StatusOr<std::unique_ptr<ShmChannel>> ring =
          name.empty() ? absl::UnavailableError("no ring")
                       : ShmChannel::Open(name, *options.clock);
      if (ring.ok()) {
        in[r][k] = *std::move(ring);
      } else {
        opened[r] = false;
      }
    }
    RETURN_IF_ERROR(kv.Put(absl::StrCat(prefix, "opened/", r, "/", me),
                           opened[r] ? "1" : "0"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> peers_opened,
                   kv.GetMany(opened_keys, options.timeout));
  std::vector<std::unique_ptr<ShmLink>> links(n);
  for (size_t p = 0; p < peers.size(); ++p) {
    const int r = peers[p];
    bool complete = opened[r] && peers_opened[p] == "1";
    for (int k = 0; k < kLanes; ++k) {
      complete = complete && out[r][k] != nullptr && in[r][k] != nullptr;
    }
    if (complete) {
      links[r] = std::make_unique<ShmLink>(std::move(out[r]), std::move(in[r]),
                                           options.timeout);
    }
  }
  return links;
}

}  // namespace pshard::worker
