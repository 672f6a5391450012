// The gRPC side of access control: the caller of one server call, found
// from its metadata and its connection's client certificate, and checked
// against the server's AccessPolicy for the method it calls.
#ifndef PSHARD_SECURITY_CALL_AUTH_H_
#define PSHARD_SECURITY_CALL_AUTH_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"
#include "security/access_policy.h"
#include "security/tokens.h"

namespace pshard::security {

// Who is calling, as far as a handler's own checks go (job ownership, the
// worker a credential names, what a listing shows).
class Caller {
 public:
  // A call on a server without access control: it may do anything.
  static Caller Unchecked() { return Caller(nullptr); }
  // A checked call by `principal` (the policy's own, which outlives the
  // call: no copy per call).
  explicit Caller(const Principal* principal) : principal_(principal) {}

  // Whether access control applies (the server has a policy).
  bool checked() const { return principal_ != nullptr; }
  // "" when unchecked, and for an anonymous caller.
  absl::string_view name() const {
    return principal_ != nullptr ? absl::string_view(principal_->name)
                                 : absl::string_view();
  }
  bool IsAdmin() const;

 private:
  const Principal* principal_;
};

// The caller of `ctx`'s call to `full_method` ("/pshard.v1.JobService/
// SubmitJob"), when `policy` lets it make the call; `policy` nullptr means
// no access control (Caller::Unchecked()). Unauthenticated or
// PermissionDenied, saying which credential or role is missing, otherwise.
absl::StatusOr<Caller> AuthorizeCall(const grpc::ServerContextBase& ctx,
                                     const AccessPolicy* policy,
                                     absl::string_view full_method);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_CALL_AUTH_H_
