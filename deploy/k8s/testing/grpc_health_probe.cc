// grpc_health_probe: what the kubelet's native gRPC probe does, as a command,
// so that the smoke test can run the manifests' probes against real processes.
// Calls grpc.health.v1.Health/Check with the probe's service name and exits 0
// when the answer is SERVING, 1 otherwise (any other status, an RPC error, or
// no answer within --timeout).
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

ABSL_FLAG(std::string, addr, "", "host:port of the gRPC server (required).");
ABSL_FLAG(std::string, service, "", "Service name to check (the probe's `service`).");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(1), "Deadline of the check (the probe's timeoutSeconds).");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string addr = absl::GetFlag(FLAGS_addr);
  if (addr.empty()) {
    std::cerr << "grpc_health_probe: --addr is required\n";
    return 2;
  }
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);

  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(absl::GetFlag(FLAGS_service));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    std::cout << "grpc_health_probe: " << addr << ": rpc failed: code "
              << status.error_code() << ": " << status.error_message() << "\n";
    return 1;
  }
  std::cout << "grpc_health_probe: " << addr << ": "
            << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                   response.status())
            << "\n";
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : 1;
}
