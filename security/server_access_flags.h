// A server's access-control flags, --auth_tokens and --auth_identities
// (access_policy.h), defined once here for the coordinator and the worker.
#ifndef PSHARD_SECURITY_SERVER_ACCESS_FLAGS_H_
#define PSHARD_SECURITY_SERVER_ACCESS_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "security/access_policy.h"

namespace pshard::security {

// For SetUpBinaryFlags, so --help lists them.
inline constexpr absl::string_view kServerAccessFlagsFile =
    "security/server_access_flags.cc";

AccessSettings AccessSettingsFromFlags();
// LoadServerAccessPolicy(AccessSettingsFromFlags(), transport): what a
// server binary enforces (nullptr: no access control).
absl::StatusOr<std::unique_ptr<AccessPolicy>> AccessPolicyFromFlags(
    const TransportSecurity& transport);
// The inverse, for a child server process.
std::vector<std::string> AccessFlags(const AccessSettings& settings);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_SERVER_ACCESS_FLAGS_H_
