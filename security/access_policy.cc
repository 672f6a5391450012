#include "security/access_policy.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"
#include "security/rpc_roles.h"

namespace pshard::security {
namespace {

absl::Status WithFlag(absl::string_view flag, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("--", flag, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AccessPolicy>> AccessPolicy::Load(
    const AccessSettings& settings) {
  TokenTable tokens;
  IdentityTable identities;
  if (!settings.tokens_file.empty()) {
    absl::StatusOr<TokenTable> loaded = TokenTable::Load(settings.tokens_file);
    if (!loaded.ok()) return WithFlag("auth_tokens", loaded.status());
    tokens = *std::move(loaded);
  }
  if (!settings.identities_file.empty()) {
    absl::StatusOr<IdentityTable> loaded =
        IdentityTable::Load(settings.identities_file);
    if (!loaded.ok()) return WithFlag("auth_identities", loaded.status());
    identities = *std::move(loaded);
  }
  return std::make_unique<AccessPolicy>(std::move(tokens),
                                        std::move(identities), settings);
}

absl::StatusOr<const Principal*> AccessPolicy::Authenticate(
    absl::string_view authorization,
    absl::Span<const std::string> certificate_names) const {
  if (!authorization.empty()) {
    // RFC 6750: the scheme is case-insensitive.
    constexpr absl::string_view kBearer = "bearer ";
    if (authorization.size() <= kBearer.size() ||
        !absl::StartsWithIgnoreCase(authorization, kBearer)) {
      return absl::UnauthenticatedError(
          "the authorization metadata is not \"Bearer TOKEN\"");
    }
    const absl::string_view token =
        absl::StripAsciiWhitespace(authorization.substr(kBearer.size()));
    if (const Principal* p = tokens_.Authenticate(token)) return p;
    // The token never goes into a message.
    return absl::UnauthenticatedError(absl::StrCat(
        "the bearer token is not one this server knows",
        settings_.tokens_file.empty()
            ? " (it takes no tokens: --auth_tokens is not set)"
            : absl::StrCat(" (not in ", settings_.tokens_file, ")")));
  }
  for (const std::string& name : certificate_names) {
    if (const Principal* p = identities_.Find(name)) return p;
  }
  return nullptr;
}

absl::StatusOr<const Principal*> AccessPolicy::Check(
    absl::string_view authorization,
    absl::Span<const std::string> certificate_names,
    absl::string_view full_method) const {
  ASSIGN_OR_RETURN(const Principal* principal,
                   Authenticate(authorization, certificate_names));
  absl::Status allowed = Authorize(principal, full_method);
  if (allowed.ok()) return principal;
  if (principal == nullptr && !certificate_names.empty() &&
      allowed.code() == absl::StatusCode::kUnauthenticated) {
    return absl::UnauthenticatedError(absl::StrCat(
        allowed.message(), "; the client certificate's name \"",
        absl::CHexEscape(certificate_names.front()), "\" is not in ",
        settings_.identities_file.empty()
            ? "any identity file (--auth_identities is not set)"
            : settings_.identities_file));
  }
  return allowed;
}

absl::StatusOr<std::unique_ptr<AccessPolicy>> LoadServerAccessPolicy(
    const AccessSettings& settings, const TransportSecurity& transport) {
  if (!settings.identities_file.empty() && transport.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--auth_identities needs --tls_ca: without it no client certificate "
        "is verified, so no certificate name could be trusted");
  }
  if (!settings.enabled()) {
    if (transport.insecure || transport.require_client_certificate) {
      return nullptr;
    }
    return absl::InvalidArgumentError(
        "a TLS server without --auth_tokens, --auth_identities or "
        "--tls_require_client_cert lets any client that reaches it call "
        "every RPC (drain workers, cancel jobs); give one of them "
        "(docs/security.md)");
  }
  return AccessPolicy::Load(settings);
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          absl::string_view what) {
  absl::StatusOr<std::string> text = checkpoint::ReadSmallFile(path, 4096);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", text.status().message()));
  }
  const absl::string_view token = absl::StripAsciiWhitespace(*text);
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", path, " is empty (want one token)"));
  }
  if (token.find_first_of(" \t\r\n") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", path, " holds more than one word (want one token)"));
  }
  return std::string(token);
}

}  // namespace pshard::security
