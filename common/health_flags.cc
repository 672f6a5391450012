#include "common/health_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/health.h"
#include "common/port_file.h"

ABSL_FLAG(std::string, health_listen, "",
          "host:port of a plaintext server that answers grpc.health.v1.Health "
          "only (Check and Watch, the same statuses as --listen's health "
          "service), for probes that cannot speak TLS such as the kubelet's; "
          "port 0 picks a free port; empty: none");
ABSL_FLAG(std::string, health_port_file, "",
          "write the --health_listen server's port here once it serves");

namespace pshard {

absl::Status HealthPortFlags::WritePort(int port) const {
  if (port_file.empty()) return absl::OkStatus();
  absl::Status written = WritePortFile(port_file, port);
  if (written.ok()) return written;
  return absl::Status(written.code(), absl::StrCat("--health_port_file: ",
                                                   written.message()));
}

absl::StatusOr<HealthPortFlags> HealthPortFlagsFromFlags() {
  HealthPortFlags flags;
  flags.listen = absl::GetFlag(FLAGS_health_listen);
  flags.port_file = absl::GetFlag(FLAGS_health_port_file);
  if (!flags.listen.empty()) {
    absl::Status valid = ValidateListenAddress("--health_listen", flags.listen);
    if (!valid.ok()) return valid;
  }
  return flags;
}

}  // namespace pshard
