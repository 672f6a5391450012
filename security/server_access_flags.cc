#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "security/server_access_flags.h"

ABSL_FLAG(std::string, auth_tokens, "",
          "Bearer-token file: one \"TOKEN NAME ROLE[,ROLE]\" per line (roles "
          "read, submit, admin, worker; a token may be given as "
          "sha256:<hex>). Callers must then present a known credential.");
ABSL_FLAG(std::string, auth_identities, "",
          "Client-certificate identity file: one \"COMMON_NAME "
          "ROLE[,ROLE]\" per line, for callers that send no token. Needs "
          "--tls_ca.");

namespace pshard::security {

AccessSettings AccessSettingsFromFlags() {
  AccessSettings settings;
  settings.tokens_file = absl::GetFlag(FLAGS_auth_tokens);
  settings.identities_file = absl::GetFlag(FLAGS_auth_identities);
  return settings;
}

absl::StatusOr<std::unique_ptr<AccessPolicy>> AccessPolicyFromFlags(
    const TransportSecurity& transport) {
  return LoadServerAccessPolicy(AccessSettingsFromFlags(), transport);
}

std::vector<std::string> AccessFlags(const AccessSettings& settings) {
  std::vector<std::string> flags;
  if (!settings.tokens_file.empty()) {
    flags.push_back(absl::StrCat("--auth_tokens=", settings.tokens_file));
  }
  if (!settings.identities_file.empty()) {
    flags.push_back(
        absl::StrCat("--auth_identities=", settings.identities_file));
  }
  return flags;
}

}  // namespace pshard::security
