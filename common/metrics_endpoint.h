// MetricsEndpoint: a binary's Prometheus endpoint (--metrics_listen), GET
// http://<listen>/metrics in the text exposition format, through
// prometheus-cpp's pull exposer. It serves one registry, for the metric
// families a binary keeps (counters, histograms), and the collectors it
// adds, which compute their families at each scrape (gauges read from the
// coordinator's or the worker's state).
#ifndef PSHARD_COMMON_METRICS_ENDPOINT_H_
#define PSHARD_COMMON_METRICS_ENDPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace pshard {

class MetricsEndpoint {
 public:
  // Listens on `listen` ("host:port"; port 0: any free port, see port()).
  // InvalidArgument for a malformed address; Unavailable when it cannot be
  // bound (the exposer's error, contained here).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen);

  // Stops serving (the exposer's threads are joined).
  ~MetricsEndpoint();

  prometheus::Registry& registry() { return *registry_; }

  // Serves `collector` too, from now on, for the endpoint's life.
  void Add(std::shared_ptr<prometheus::Collectable> collector);

  // The port it listens on.
  int port() const;

 private:
  MetricsEndpoint() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectors_;
  // Last: stops serving before what it serves goes away.
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace pshard

#endif  // PSHARD_COMMON_METRICS_ENDPOINT_H_
