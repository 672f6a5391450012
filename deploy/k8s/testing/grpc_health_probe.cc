// grpc_health_probe: what the kubelet's native gRPC probe does, as a command,
// so that the smoke test can run the manifests' probes against real processes.
// Calls grpc.health.v1.Health/Check with the probe's service name and exits 0
// when the answer is SERVING, 1 otherwise (any other status, an RPC error, or
// no answer within --timeout).
//
// The health protocol's messages are tiny, so they are written and read by
// hand rather than generated: HealthCheckRequest is {1: string service};
// HealthCheckResponse is {1: enum status}, SERVING = 1.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"

ABSL_FLAG(std::string, addr, "", "host:port of the gRPC server (required).");
ABSL_FLAG(std::string, service, "", "Service name to check (the probe's `service`).");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(1), "Deadline of the check (the probe's timeoutSeconds).");

namespace {

std::string EncodeRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;
  out.push_back(0x0a);  // field 1, length-delimited
  uint64_t n = service.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + service;
}

// The status field of a HealthCheckResponse; 0 (UNKNOWN) when absent, -1 when
// the bytes are not a response.
int DecodeStatus(const std::string& bytes) {
  int status = 0;
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t key = static_cast<uint8_t>(bytes[i++]);
    if ((key & 0x7) != 0) return -1;  // only varint fields are expected
    uint64_t value = 0;
    int shift = 0;
    while (true) {
      if (i >= bytes.size() || shift > 63) return -1;
      const uint8_t b = static_cast<uint8_t>(bytes[i++]);
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      shift += 7;
      if ((b & 0x80) == 0) break;
    }
    if ((key >> 3) == 1) status = static_cast<int>(value);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string addr = absl::GetFlag(FLAGS_addr);
  if (addr.empty()) {
    std::cerr << "grpc_health_probe: --addr is required\n";
    return 2;
  }
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);

  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));

  const std::string request_bytes = EncodeRequest(absl::GetFlag(FLAGS_service));
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  // The RPC's own deadline ends it; the extra second only guards against a
  // callback that never comes.
  if (!done.WaitForNotificationWithTimeout(timeout + absl::Seconds(1))) {
    context.TryCancel();
    done.WaitForNotification();
  }
  if (!status.ok()) {
    std::cout << "grpc_health_probe: " << addr << ": rpc failed: code "
              << status.error_code() << ": " << status.error_message() << "\n";
    return 1;
  }
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    std::cout << "grpc_health_probe: " << addr << ": unreadable response\n";
    return 1;
  }
  std::string bytes;
  for (const auto& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  const int serving = DecodeStatus(bytes);
  static const char* const kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING",
                                       "SERVICE_UNKNOWN"};
  const char* name = serving >= 0 && serving < 4 ? kNames[serving] : "INVALID";
  std::cout << "grpc_health_probe: " << addr << ": " << name << "\n";
  return serving == 1 ? 0 : 1;
}
