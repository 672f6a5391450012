#include "security/call_auth.h"

#include <vector>

#include "grpcpp/security/auth_context.h"
#include "security/rpc_roles.h"

namespace pshard::security {

bool Caller::IsAdmin() const {
  return !principal_.has_value() || Holds(*principal_, Role::kAdmin);
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
  std::vector<std::string> names;
  if (std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context()) {
    for (const grpc::string_ref& name :
         auth->FindPropertyValues("x509_common_name")) {
      names.emplace_back(name.data(), name.size());
    }
  }
  absl::StatusOr<const Principal*> principal =
      policy->Check(authorization, names, full_method);
  if (!principal.ok()) return principal.status();
  if (*principal == nullptr) {
    // Anonymous, on a method anyone may call.
    return Caller(Principal{});
  }
  return Caller(**principal);
}

}  // namespace pshard::security
