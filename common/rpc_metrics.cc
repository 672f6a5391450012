#include "common/rpc_metrics.h"

#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

namespace pshard {
namespace {

struct RpcFamilies {
  explicit RpcFamilies(prometheus::Registry& registry)
      : total(prometheus::BuildCounter()
                  .Name("pshard_rpc_total")
                  .Help("RPCs answered, by method and status code")
                  .Register(registry)),
        duration(prometheus::BuildHistogram()
                     .Name("pshard_rpc_duration_seconds")
                     .Help("Time from an RPC's arrival to its status, by "
                           "method")
                     .Register(registry)) {}

  prometheus::Family<prometheus::Counter>& total;
  prometheus::Family<prometheus::Histogram>& duration;
};

class RpcMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(RpcFamilies& families, std::string method)
      : families_(families), method_(std::move(method)), start_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const std::string code = absl::StatusCodeToString(
          static_cast<absl::StatusCode>(status.error_code()));
      families_.total.Add({{"method", method_}, {"code", code}}).Increment();
      families_.duration.Add({{"method", method_}}, LatencyBuckets())
          .Observe(absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  RpcFamilies& families_;
  const std::string method_;
  const absl::Time start_;
};

class RpcMetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcMetricsInterceptorFactory(prometheus::Registry& registry)
      : families_(registry) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcMetricsInterceptor(families_, info->method());
  }

 private:
  RpcFamilies families_;
};

}  // namespace

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const buckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10,   60};
  return *buckets;
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
RpcMetricsInterceptors(prometheus::Registry& registry) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<RpcMetricsInterceptorFactory>(registry));
  return interceptors;
}

}  // namespace pshard
