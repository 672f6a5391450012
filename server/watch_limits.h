// How many WatchJob streams are open, per client and in all, and whether one
// more may open. A stream holds a server thread for as long as it lasts, so
// one global cap let a single client (a dashboard polling in a loop, a
// script that leaks streams) take every slot from everybody else. Each
// client now has its own, smaller cap under a higher global one.
//
// A client is the host of its peer address (grpc::ServerContext::peer()
// without the port, PeerHost): every process on one machine, or behind one
// NAT, shares it; that is the unit a cap can protect others from.
//
// Not thread-safe: JobServiceImpl calls it under its own mutex.
#ifndef PSHARD_SERVER_WATCH_LIMITS_H_
#define PSHARD_SERVER_WATCH_LIMITS_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pshard {
namespace server {

// The host of a gRPC peer string: "ipv4:10.1.2.3:5000" -> "10.1.2.3",
// "ipv6:[::1]:5000" -> "::1"; any other form (unix:PATH, inproc, ...) is
// returned whole, so each such peer is its own client.
std::string PeerHost(absl::string_view peer);

class WatchLimits {
 public:
  WatchLimits(int per_client, int total)
      : per_client_(per_client), total_(total) {}

  // Counts one more stream of `client`. ResourceExhausted naming the limit
  // that refused it: "too many WatchJob streams from 10.1.2.3 (8 per client,
  // max_watchers_per_client); ..." or "too many WatchJob streams (1024,
  // max_watchers); ...".
  absl::Status Open(const std::string& client);
  // One stream of `client` ended (one Open succeeded for it).
  void Close(const std::string& client);

  int open() const { return open_; }
  int open_by(const std::string& client) const;

 private:
  const int per_client_;
  const int total_;
  int open_ = 0;
  // Clients with at least one open stream.
  absl::flat_hash_map<std::string, int> by_client_;
};

}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_WATCH_LIMITS_H_
