#include "security/rpc_roles.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pshard::security {
namespace {

struct MethodRole {
  absl::string_view method;  // "Service/Method" without the package
  Role role;
};

constexpr MethodRole kMethodRoles[] = {
    {"JobService/SubmitJob", Role::kSubmit},
    {"JobService/CancelJob", Role::kSubmit},
    {"JobService/GetJob", Role::kRead},
    {"JobService/ListJobs", Role::kRead},
    {"JobService/WatchJob", Role::kRead},
    {"ShardService/GetShardAssignment", Role::kRead},
    {"ClusterService/ListWorkers", Role::kRead},
    {"ClusterService/GetWorker", Role::kRead},
    {"ClusterService/DrainWorker", Role::kAdmin},
    {"ClusterService/UndrainWorker", Role::kAdmin},
    {"WorkerStatus/GetStatus", Role::kRead},
    {"WorkerStatus/StreamLogs", Role::kRead},
};

constexpr absl::string_view kPshardPrefix = "/pshard.v1.";
constexpr absl::string_view kWorkerControl = "/pshard.v1.WorkerControl/";
constexpr absl::string_view kPublicServices[] = {
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
};

absl::string_view MethodName(absl::string_view full_method) {
  const size_t slash = full_method.rfind('/');
  return slash == absl::string_view::npos ? full_method
                                          : full_method.substr(slash + 1);
}

}  // namespace

absl::StatusOr<std::optional<Role>> RequiredRole(
    absl::string_view full_method) {
  for (absl::string_view service : kPublicServices) {
    if (absl::StartsWith(full_method, service)) return std::nullopt;
  }
  if (absl::StartsWith(full_method, kWorkerControl)) return Role::kWorker;
  if (absl::StartsWith(full_method, kPshardPrefix)) {
    const absl::string_view method = full_method.substr(kPshardPrefix.size());
    for (const MethodRole& entry : kMethodRoles) {
      if (method == entry.method) return entry.role;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no access rule for ", full_method));
}

bool Holds(const Principal& principal, Role role) {
  switch (role) {
    case Role::kRead:
      return principal.Has(Role::kRead) || principal.Has(Role::kSubmit) ||
             principal.Has(Role::kAdmin);
    case Role::kSubmit:
      return principal.Has(Role::kSubmit) || principal.Has(Role::kAdmin);
    case Role::kAdmin:
      return principal.Has(Role::kAdmin);
    case Role::kWorker:
      return principal.Has(Role::kWorker);
  }
  return false;
}

absl::Status Authorize(const Principal* principal,
                       absl::string_view full_method) {
  absl::StatusOr<std::optional<Role>> role = RequiredRole(full_method);
  if (!role.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat(role.status().message(), ": refused"));
  }
  if (!role->has_value()) return absl::OkStatus();
  const absl::string_view method = MethodName(full_method);
  if (principal == nullptr) {
    return absl::UnauthenticatedError(absl::StrCat(
        method, " needs a credential with role ", RoleName(**role),
        ": a bearer token (pshardctl --token_file or $PSHARD_TOKEN) or a "
        "client certificate the server maps to a principal"));
  }
  if (Holds(*principal, **role)) return absl::OkStatus();
  std::vector<std::string> roles;
  for (Role r : principal->roles) roles.emplace_back(RoleName(r));
  return absl::PermissionDeniedError(absl::StrCat(
      principal->name, " (roles: ",
      roles.empty() ? "none" : absl::StrJoin(roles, ","), ") may not call ",
      method, ": it needs role ", RoleName(**role)));
}

}  // namespace pshard::security
