#include "server/watch_limits.h"

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"

namespace pshard {
namespace server {

std::string PeerHost(absl::string_view peer) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    return std::string(colon == absl::string_view::npos ? peer
                                                        : peer.substr(0, colon));
  }
  if (absl::ConsumePrefix(&peer, "ipv6:")) {
    // "[addr]:port"; an address without brackets has no port to strip.
    if (absl::ConsumePrefix(&peer, "[")) {
      const size_t close = peer.find(']');
      if (close != absl::string_view::npos) {
        return std::string(peer.substr(0, close));
      }
    }
    return std::string(peer);
  }
  return std::string(peer);
}

absl::Status WatchLimits::Open(const std::string& client) {
  // The client's own cap first: a client at its cap learns that it is the
  // one to blame, even when the server is full too.
  auto it = by_client_.find(client);
  if (it != by_client_.end() && it->second >= per_client_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "too many WatchJob streams from ", client, " (", per_client_,
        " per client, max_watchers_per_client); close one or poll GetJob "
        "instead"));
  }
  if (open_ >= total_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many WatchJob streams (", total_,
                     ", max_watchers); poll GetJob instead"));
  }
  ++by_client_[client];
  ++open_;
  return absl::OkStatus();
}

void WatchLimits::Close(const std::string& client) {
  auto it = by_client_.find(client);
  if (it == by_client_.end()) return;
  --open_;
  // Forget idle clients: the map stays as small as the open streams.
  if (--it->second == 0) by_client_.erase(it);
}

int WatchLimits::open_by(const std::string& client) const {
  auto it = by_client_.find(client);
  return it == by_client_.end() ? 0 : it->second;
}

}  // namespace server
}  // namespace pshard
