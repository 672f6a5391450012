// MetricsEndpoint: a binary's Prometheus endpoint (--metrics_listen), GET
// http://<listen>/metrics in the text exposition format. It serves one
// registry, for the metric families a binary keeps (counters, histograms),
// and the collectors it adds, which compute their families at each scrape
// (gauges read from the coordinator's or the worker's state).
//
// The metrics are prometheus-cpp's (core: families, TextSerializer); the
// HTTP side is a small server of ours, one thread answering one scrape at
// a time. prometheus-cpp's pull exposer cannot be used: Debian's civetweb
// under it starts its threads with a fixed 100 KiB stack, and glibc refuses
// such threads (EINVAL) in a process whose static TLS is larger — the
// worker's is (cuBLASLt and OpenBLAS alone hold 150 KiB).
#ifndef PSHARD_COMMON_METRICS_ENDPOINT_H_
#define PSHARD_COMMON_METRICS_ENDPOINT_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/registry.h"

namespace pshard {

class MetricsEndpoint {
 public:
  // Listens on `listen` ("host:port"; an IPv4 address or "localhost";
  // port 0: any free port, see port()). InvalidArgument for a malformed
  // address; Unavailable when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen);

  // Stops serving: the thread is joined, the socket closed.
  ~MetricsEndpoint();

  prometheus::Registry& registry() { return *registry_; }

  // Serves `collector` too, from now on, for the endpoint's life.
  void Add(std::shared_ptr<prometheus::Collectable> collector)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The port it listens on.
  int port() const { return port_; }

  // The text a scrape gets now.
  std::string Render() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  MetricsEndpoint(int listen_fd, int port, int stop_read, int stop_write);
  void Serve();
  void Answer(int fd) const;

  const int listen_fd_;
  const int port_;
  // The destructor writes to stop_write_ to end Serve()'s poll.
  const int stop_read_;
  const int stop_write_;
  const std::shared_ptr<prometheus::Registry> registry_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectors_
      ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once every field is set
};

}  // namespace pshard

#endif  // PSHARD_COMMON_METRICS_ENDPOINT_H_
