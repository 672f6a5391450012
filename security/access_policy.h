// Access control for a pshard server: who the caller of an RPC is (its
// bearer token, else its client certificate's common name), and whether its
// roles let it call the method (rpc_roles.h). server/services.cc and the
// worker's status server ask it once per call (call_auth.h).
#ifndef PSHARD_SECURITY_ACCESS_POLICY_H_
#define PSHARD_SECURITY_ACCESS_POLICY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "security/tokens.h"
#include "security/transport.h"

namespace pshard::security {

// Where a server's policy comes from (--auth_tokens, --auth_identities).
// Neither set: no access control (any caller may call anything).
struct AccessSettings {
  std::string tokens_file;
  std::string identities_file;

  bool enabled() const {
    return !tokens_file.empty() || !identities_file.empty();
  }
};

class AccessPolicy {
 public:
  // Reads the files of `settings` (enabled()). InvalidArgument naming the
  // flag, file and line of a bad entry.
  static absl::StatusOr<std::unique_ptr<AccessPolicy>> Load(
      const AccessSettings& settings);

  AccessPolicy(TokenTable tokens, IdentityTable identities,
               AccessSettings settings = {})
      : tokens_(std::move(tokens)),
        identities_(std::move(identities)),
        settings_(std::move(settings)) {}

  // The principal of a call that sent `authorization` (its "authorization"
  // metadata; empty when none) over a connection whose client certificate
  // has `certificate_names` (common names; empty without one). A token
  // decides when one is sent; else the first name the identity table knows.
  // nullptr: the caller presented nothing this policy knows (an anonymous
  // caller, which may still call health and reflection).
  // Unauthenticated: a token that is not in the table, or an authorization
  // value that is not "Bearer TOKEN".
  absl::StatusOr<const Principal*> Authenticate(
      absl::string_view authorization,
      absl::Span<const std::string> certificate_names) const;

  // Authenticate, then Authorize(full_method). For an anonymous caller with
  // a certificate the identity table does not know, the message names the
  // certificate.
  absl::StatusOr<const Principal*> Check(
      absl::string_view authorization,
      absl::Span<const std::string> certificate_names,
      absl::string_view full_method) const;

 private:
  TokenTable tokens_;
  IdentityTable identities_;
  AccessSettings settings_;
};

// A server's policy from its flags: nullptr (no access control) when
// `settings` names no file and the server is plaintext (--insecure, bound to
// loopback unless told otherwise) or requires client certificates (every
// caller then holds one the CA signed). InvalidArgument, naming the flags,
// for a TLS server that would let any client that reaches it call every
// RPC, and for --auth_identities without --tls_ca (no client certificate is
// checked, so no name could be trusted).
absl::StatusOr<std::unique_ptr<AccessPolicy>> LoadServerAccessPolicy(
    const AccessSettings& settings, const TransportSecurity& transport);

// A bearer token file's token: its contents without surrounding whitespace.
// InvalidArgument naming `what` (a flag) for an unreadable or empty file,
// or one holding more than one line.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          absl::string_view what);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_ACCESS_POLICY_H_
