#include "common/metrics_endpoint.h"

#include <exception>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pshard {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address \"", listen, "\": want host:port (port 0: any)"));
  }
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  endpoint->registry_ = std::make_shared<prometheus::Registry>();
  try {
    // One thread: a scrape every few seconds needs no more.
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint on ", listen, ": ", e.what()));
  }
  endpoint->exposer_->RegisterCollectable(endpoint->registry_);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() { exposer_.reset(); }

void MetricsEndpoint::Add(std::shared_ptr<prometheus::Collectable> collector) {
  exposer_->RegisterCollectable(collector);
  collectors_.push_back(std::move(collector));
}

int MetricsEndpoint::port() const {
  const std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace pshard
