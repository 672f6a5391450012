#include "security/call_auth.h"

#include <vector>

#include "grpcpp/security/auth_context.h"
#include "security/rpc_roles.h"

namespace pshard::security {

namespace {

// The principal of a call that may be made without a credential (health,
// reflection) and came without one.
const Principal& Anonymous() {
  static const Principal* const anonymous = new Principal();
  return *anonymous;
}

}  // namespace

bool Caller::IsAdmin() const {
  return principal_ == nullptr || Holds(*principal_, Role::kAdmin);
}

absl::StatusOr<Caller> AuthorizeCall(const grpc::ServerContextBase& ctx,
                                     const AccessPolicy* policy,
                                     absl::string_view full_method) {
  if (policy == nullptr) return Caller::Unchecked();
  absl::string_view authorization;
  const auto& metadata = ctx.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  // The client certificate's common names, as gRPC verified them against
  // --tls_ca (none on a plaintext connection or without a certificate).
  // Only looked at without a token, which decides when sent.
  std::vector<std::string> names;
  if (std::shared_ptr<const grpc::AuthContext> auth =
          authorization.empty() ? ctx.auth_context() : nullptr) {
    for (const grpc::string_ref& name :
         auth->FindPropertyValues("x509_common_name")) {
      names.emplace_back(name.data(), name.size());
    }
  }
  absl::StatusOr<const Principal*> principal =
      policy->Check(authorization, names, full_method);
  if (!principal.ok()) return principal.status();
  // nullptr: anonymous, on a method anyone may call.
  return Caller(*principal == nullptr ? &Anonymous() : *principal);
}

}  // namespace pshard::security
