// Every RPC a gRPC server answers, counted by method and status code, and
// timed, into a Prometheus registry:
//
//   pshard_rpc_total{method="/pshard.v1.JobService/SubmitJob", code="OK"}
//   pshard_rpc_duration_seconds{method=...}   (histogram, 100 us .. 60 s)
//
// A server interceptor (gRPC's experimental interception API), so that no
// service has to remember it. Streams are timed until their status.
#ifndef PSHARD_COMMON_RPC_METRICS_H_
#define PSHARD_COMMON_RPC_METRICS_H_

#include <memory>
#include <vector>

#include "grpcpp/support/server_interceptor.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pshard {

// For ServerBuilder::experimental().SetInterceptorCreators. `registry`
// must outlive the server.
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
RpcMetricsInterceptors(prometheus::Registry& registry);

// The buckets of every latency histogram pshard exports: 100 us .. 60 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

}  // namespace pshard

#endif  // PSHARD_COMMON_RPC_METRICS_H_
