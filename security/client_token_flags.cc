#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "security/client_token_flags.h"
#include "security/access_policy.h"

ABSL_FLAG(std::string, token_file, "",
          "File holding this client's bearer token, sent on every call "
          "(default $PSHARD_TOKEN_FILE, then the token in $PSHARD_TOKEN).");

namespace pshard::security {

absl::StatusOr<std::string> BearerTokenFromFlags(
    const std::function<std::string(const std::string&)>& resolve) {
  const std::string flag = absl::GetFlag(FLAGS_token_file);
  if (!flag.empty()) return ReadTokenFile(resolve(flag), "--token_file");
  if (const char* file = std::getenv("PSHARD_TOKEN_FILE");
      file != nullptr && *file != '\0') {
    return ReadTokenFile(resolve(file), "$PSHARD_TOKEN_FILE");
  }
  const char* token = std::getenv("PSHARD_TOKEN");
  return std::string(token == nullptr ? "" : token);
}

}  // namespace pshard::security
