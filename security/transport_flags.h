// The transport-security flags every pshard binary takes (--insecure,
// --tls_cert, --tls_key, --tls_ca, --tls_require_client_cert,
// --tls_server_name, --tls_reload_interval), defined once here.
#ifndef PSHARD_SECURITY_TRANSPORT_FLAGS_H_
#define PSHARD_SECURITY_TRANSPORT_FLAGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "security/transport.h"

namespace pshard::security {

// The file that defines the flags, for SetUpBinaryFlags (so --help lists
// them beside the binary's own).
inline constexpr absl::string_view kTransportFlagsFile =
    "security/transport_flags.cc";

// The flags' values (not yet validated: see ValidateServerSecurity /
// ValidateClientSecurity). What no flag sets comes from the environment, so
// pshardctl users can set it once: $PSHARD_INSECURE=1 (only when no
// --tls_cert or --tls_ca is given), $PSHARD_TLS_CA.
TransportSecurity TransportSecurityFromFlags();

// The inverse: the flags that give a child server process `security`
// (`--insecure`, or --tls_cert/--tls_key/--tls_ca and
// --tls_require_client_cert as set).
std::vector<std::string> TransportSecurityFlags(
    const TransportSecurity& security);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_TRANSPORT_FLAGS_H_
