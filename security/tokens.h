// Who a caller is: bearer tokens and client-certificate names, each mapped
// to a principal (a name) and its roles.
//
// A token file (--auth_tokens) maps each token to a principal:
//
//   # token                            name             roles
//   3f1c...e9                          alice            submit
//   77aa...01                          ops              admin
//   sha256:9b1e...40                   pshard-worker-0  worker
//   d00d...42                          dashboards       read
//
// A token is given as itself, or as "sha256:" and the 64 hex digits of its
// SHA-256, so that a file mounted on many hosts (every worker checks the
// tokens of pshardctl logs) need not hold anything a reader could present.
// A worker principal's name is the worker's name (--name): it may act as
// that worker, and as "NAME:<i>" (i = 0..63, decimal), the names of the
// children of `pshard-worker --name=NAME --local_ranks=N`, which share the
// supervisor's token; nothing else (security/worker_principal.h). So a
// worker principal's name may not contain ':' (Parse refuses it).
//
// An identity file (--auth_identities) maps client-certificate common names
// to roles: "NAME ROLE[,ROLE...]" per line.
//
// In both, one entry per line, fields separated by spaces or tabs, roles by
// commas; blank lines and lines starting with '#' are ignored. A presented
// token is hashed and looked up by its digest: what a lookup's time can show
// is where a digest falls in the table, which says nothing about any token
// (finding a token from its digest is a preimage attack on SHA-256).
#ifndef PSHARD_SECURITY_TOKENS_H_
#define PSHARD_SECURITY_TOKENS_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard::security {

// What a principal may do (docs/security.md has the method table):
//   read    status only: jobs, shard assignments, workers;
//   submit  read, and submit, watch and cancel its own jobs;
//   admin   everything a person may do: cancel any job, drain, undrain;
//   worker  WorkerControl, as the worker its name names.
enum class Role { kRead, kSubmit, kAdmin, kWorker };

absl::string_view RoleName(Role role);
// "read", "submit", "admin", "worker"; InvalidArgument listing them.
absl::StatusOr<Role> ParseRole(absl::string_view name);

struct Principal {
  std::string name;
  std::vector<Role> roles;

  bool Has(Role role) const;
};

class TokenTable {
 public:
  // `source` names the text in errors (a file path). InvalidArgument naming
  // the line for an entry without a name or roles, an unknown role, a token
  // shorter than kMinTokenBytes, a token or name given twice, or a
  // principal with role worker whose name contains ':'.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text,
                                          absl::string_view source);
  // Parse() of a file of at most 1 MiB.
  static absl::StatusOr<TokenTable> Load(const std::string& path);

  // The principal `token` belongs to, or nullptr.
  const Principal* Authenticate(absl::string_view token) const;

  size_t size() const { return by_digest_.size(); }

  // Shorter tokens are refused: 32 hex digits are 128 bits of randomness
  // (`openssl rand -hex 32` gives 64 digits, 256 bits).
  static constexpr size_t kMinTokenBytes = 32;

 private:
  // Keyed by the SHA-256 of the token, as raw bytes.
  absl::flat_hash_map<std::string, Principal> by_digest_;
};

// Client-certificate common names and their roles.
class IdentityTable {
 public:
  // Errors as TokenTable::Parse's: a line without roles, an unknown role, a
  // name given twice, a worker's name with ':'.
  static absl::StatusOr<IdentityTable> Parse(absl::string_view text,
                                             absl::string_view source);
  static absl::StatusOr<IdentityTable> Load(const std::string& path);

  // The principal named `common_name`, or nullptr.
  const Principal* Find(absl::string_view common_name) const;

  size_t size() const { return by_name_.size(); }

 private:
  absl::flat_hash_map<std::string, Principal> by_name_;
};

// A new random token (64 hex digits), for `pshardctl local` and tests.
absl::StatusOr<std::string> NewToken();

// "sha256:" and the hex SHA-256 of `token`: how a token file may name it.
std::string TokenDigest(absl::string_view token);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_TOKENS_H_
