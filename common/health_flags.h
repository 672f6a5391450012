// The health-only port's flags (--health_listen, --health_port_file), which
// the coordinator and the worker both take, defined once here.
#ifndef PSHARD_COMMON_HEALTH_FLAGS_H_
#define PSHARD_COMMON_HEALTH_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard {

// For SetUpBinaryFlags, so --help lists them beside the binary's own.
inline constexpr absl::string_view kHealthFlagsFile = "common/health_flags.cc";

struct HealthPortFlags {
  // Where HealthOnlyServer listens; empty: no health-only server.
  std::string listen;
  // Where its port is written once it serves; empty: nowhere.
  std::string port_file;

  // Writes `port` to port_file when one is named; errors name the flag.
  absl::Status WritePort(int port) const;
};

// The flags, --health_listen checked (ValidateListenAddress): a malformed
// address is InvalidArgument naming the flag (a usage error: exit 2).
absl::StatusOr<HealthPortFlags> HealthPortFlagsFromFlags();

}  // namespace pshard

#endif  // PSHARD_COMMON_HEALTH_FLAGS_H_
