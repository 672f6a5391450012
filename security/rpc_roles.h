// Which role each pshard RPC needs, and the check itself. The gRPC layer
// (next step: an AuthMetadataProcessor on the coordinator and worker
// servers) finds the caller's Principal from its bearer token or client
// certificate and calls Authorize with the method's full name.
//
//   role     methods
//   (none)   grpc.health.v1.Health/*, server reflection
//   read     JobService Get/List/Watch, ShardService/*, ClusterService
//            List/GetWorker, WorkerStatus/*
//   submit   JobService SubmitJob, CancelJob (its own jobs: the caller
//            checks ownership)
//   admin    ClusterService Drain/UndrainWorker; CancelJob of any job
//   worker   WorkerControl/* (as the worker its name names: the caller
//            checks the worker id)
//
// admin includes submit and read; submit includes read; worker includes
// nothing else.
#ifndef PSHARD_SECURITY_RPC_ROLES_H_
#define PSHARD_SECURITY_RPC_ROLES_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "security/tokens.h"

namespace pshard::security {

// The role `full_method` ("/pshard.v1.JobService/SubmitJob") needs;
// nullopt for the methods anyone may call (health, reflection). NotFound
// for a method this table does not know: refused, so a new RPC is closed
// until someone decides who may call it.
absl::StatusOr<std::optional<Role>> RequiredRole(absl::string_view full_method);

// Whether `principal` holds `role`, counting the roles that include it.
bool Holds(const Principal& principal, Role role);

// OK when `principal` (nullptr: no credential) may call `full_method`;
// UNAUTHENTICATED naming the credentials it takes when there is none;
// PERMISSION_DENIED naming the principal, its roles and the role needed.
absl::Status Authorize(const Principal* principal,
                       absl::string_view full_method);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_RPC_ROLES_H_
