#include "security/transport_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

ABSL_FLAG(bool, insecure, false,
          "Plaintext gRPC, no TLS (default $PSHARD_INSECURE=1 when no --tls_* "
          "flag is given). A server then listens on 127.0.0.1 unless --listen "
          "names another address.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain this process presents; re-read when the "
          "file changes.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that servers' certificates (and, on a server, "
          "clients' certificates) are checked against; default "
          "$PSHARD_TLS_CA, then the system's roots.");
ABSL_FLAG(bool, tls_require_client_cert, false,
          "Server: mutual TLS; refuse clients without a certificate signed "
          "by --tls_ca.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Client: the name the server's certificate must carry when it is "
          "not the host dialled.");
ABSL_FLAG(absl::Duration, tls_reload_interval,
          pshard::security::TransportSecurity{}.reload_interval,
          "How often the TLS files are checked for changes.");

namespace pshard::security {

TransportSecurity TransportSecurityFromFlags() {
  TransportSecurity s;
  s.insecure = absl::GetFlag(FLAGS_insecure);
  s.certificate_file = absl::GetFlag(FLAGS_tls_cert);
  s.key_file = absl::GetFlag(FLAGS_tls_key);
  s.ca_file = absl::GetFlag(FLAGS_tls_ca);
  // The environment fills in only what no flag said, so a command line
  // always wins over it.
  const bool tls_flag_given =
      !s.certificate_file.empty() || !s.ca_file.empty();
  if (!s.insecure && !tls_flag_given) {
    const char* insecure = std::getenv("PSHARD_INSECURE");
    s.insecure = insecure != nullptr && std::string(insecure) == "1";
  }
  if (s.ca_file.empty() && !s.insecure) {
    const char* env = std::getenv("PSHARD_TLS_CA");
    if (env != nullptr) s.ca_file = env;
  }
  s.require_client_certificate = absl::GetFlag(FLAGS_tls_require_client_cert);
  s.server_name = absl::GetFlag(FLAGS_tls_server_name);
  s.reload_interval = absl::GetFlag(FLAGS_tls_reload_interval);
  return s;
}

std::vector<std::string> TransportSecurityFlags(const TransportSecurity& s) {
  if (s.insecure) return {"--insecure"};
  std::vector<std::string> flags;
  for (const auto& [name, value] :
       {std::pair<const char*, const std::string&>{"tls_cert",
                                                   s.certificate_file},
        {"tls_key", s.key_file},
        {"tls_ca", s.ca_file},
        {"tls_server_name", s.server_name}}) {
    if (!value.empty()) flags.push_back(absl::StrCat("--", name, "=", value));
  }
  if (s.require_client_certificate) {
    flags.push_back("--tls_require_client_cert");
  }
  if (s.reload_interval != TransportSecurity{}.reload_interval) {
    flags.push_back(absl::StrCat("--tls_reload_interval=",
                                 absl::FormatDuration(s.reload_interval)));
  }
  return flags;
}

}  // namespace pshard::security
