// A client's bearer token: --token_file, defined once here for pshardctl,
// the worker's control plane and the tools that call the coordinator.
#ifndef PSHARD_SECURITY_CLIENT_TOKEN_FLAGS_H_
#define PSHARD_SECURITY_CLIENT_TOKEN_FLAGS_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard::security {

// For SetUpBinaryFlags, so --help lists it.
inline constexpr absl::string_view kClientTokenFlagsFile =
    "security/client_token_flags.cc";

// The contents of --token_file, else of $PSHARD_TOKEN_FILE, else
// $PSHARD_TOKEN; "" when none is given. InvalidArgument naming the flag or
// variable for an unreadable or empty file. `resolve` maps a file's path as
// given to the one to open (pshardctl's paths are the user's, under
// `bazel run`).
absl::StatusOr<std::string> BearerTokenFromFlags(
    const std::function<std::string(const std::string&)>& resolve =
        [](const std::string& path) { return path; });

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_CLIENT_TOKEN_FLAGS_H_
