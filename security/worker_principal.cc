#include "security/worker_principal.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"

namespace pshard::security {

std::string LocalRankWorkerName(absl::string_view principal, int local_index) {
  return absl::StrCat(principal, ":", local_index);
}

bool WorkerPrincipalMayActAs(absl::string_view principal,
                             absl::string_view worker_name) {
  if (worker_name == principal) return true;
  // A principal with ':' cannot be loaded; should one get here, it acts as
  // itself only, so that "p:1" never covers "p:1:2".
  if (principal.empty() || absl::StrContains(principal, ':') ||
      !absl::ConsumePrefix(&worker_name, principal) ||
      !absl::ConsumePrefix(&worker_name, ":")) {
    return false;
  }
  // Decimal, no sign, no leading zero, below kMaxLocalRanks (2 digits).
  if (worker_name.empty() || worker_name.size() > 2) return false;
  for (char c : worker_name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  if (worker_name.size() > 1 && worker_name[0] == '0') return false;
  int index = 0;
  for (char c : worker_name) index = index * 10 + (c - '0');
  return index < kMaxLocalRanks;
}

absl::Status ValidateWorkerPrincipalName(absl::string_view name) {
  if (absl::StrContains(name, ':')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a principal with role worker may not have ':' in its name (\"",
        name.substr(0, 253),
        "\"): \"P:<i>\" is the name of local rank i of the worker principal "
        "P (pshard-worker --local_ranks)"));
  }
  return absl::OkStatus();
}

}  // namespace pshard::security
