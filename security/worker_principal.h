// Which worker names a worker principal may act as. A principal with role
// worker (a token's or a client certificate's name, security/tokens.h) is
// one worker process, or one `pshard-worker --local_ranks N` supervisor
// whose N children share its credential (one Kubernetes pod, one token):
// principal P may register and act as the worker named P, or as
// "P:<i>" with i a local index 0..kMaxLocalRanks-1 written in decimal
// without leading zeros ("P:0", "P:12"), and as nothing else ("P:x",
// "P:01", "P:1:2" and "Q:1" are refused). So that no principal can itself
// be a child's name, a worker principal's name may not contain ':'
// (ValidateWorkerPrincipalName; the token and identity loaders refuse it).
#ifndef PSHARD_SECURITY_WORKER_PRINCIPAL_H_
#define PSHARD_SECURITY_WORKER_PRINCIPAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pshard::security {

// The most ranks one supervisor runs (pshard-worker --local_ranks).
inline constexpr int kMaxLocalRanks = 64;

// "P:<i>": the name of local rank `local_index` of supervisor `principal`.
std::string LocalRankWorkerName(absl::string_view principal, int local_index);

// True when a worker principal named `principal` may act as the worker
// named `worker_name` (the rule in the header comment).
bool WorkerPrincipalMayActAs(absl::string_view principal,
                             absl::string_view worker_name);

// InvalidArgument when `name` contains ':' (a worker principal's name).
absl::Status ValidateWorkerPrincipalName(absl::string_view name);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_WORKER_PRINCIPAL_H_
