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
  std::vector<bool> same(n, false);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    ASSIGN_OR_RETURN(std::string other,
                     kv.Get(absl::StrCat(prefix, "host/", r), options.timeout));
    same[r] = other == identity;
  }
  std::vector<Rings> out(n);
  std::vector<Rings> in(n);
  for (int r = 0; r < n; ++r) {
    if (!same[r]) continue;
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
    }
  }
  std::vector<bool> opened(n, false);
  for (int r = 0; r < n; ++r) {
    if (!same[r]) continue;
    opened[r] = true;
    for (int k = 0; k < kLanes; ++k) {
      ASSIGN_OR_RETURN(
          std::string name,
          kv.Get(absl::StrCat(prefix, "ring/", r, "/", me, "/", k),
                 options.timeout));
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
  std::vector<std::unique_ptr<ShmLink>> links(n);
  for (int r = 0; r < n; ++r) {
    if (!same[r]) continue;
    ASSIGN_OR_RETURN(std::string peer_opened,
                     kv.Get(absl::StrCat(prefix, "opened/", me, "/", r),
                            options.timeout));
    bool complete = opened[r] && peer_opened == "1";
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
