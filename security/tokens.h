// Bearer tokens and the roles they carry. A token file maps each token to a
// principal (a name) and its roles:
//
//   # token                            name          roles
//   3f1c...e9  alice         submit
//   77aa...01  ops           admin
//   c0ff...ee  w-pool        worker
//   d00d...42  dashboards    read
//
// One entry per line, fields separated by spaces or tabs, roles by commas;
// blank lines and lines starting with '#' are ignored. Tokens are compared
// in constant time (SHA-256 of the presented token against each entry's,
// every entry every time), so neither a token's prefix nor its position in
// the file shows in the time an answer takes.
#ifndef PSHARD_SECURITY_TOKENS_H_
#define PSHARD_SECURITY_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

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
  // shorter than kMinTokenBytes, or a token or name given twice.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text,
                                          absl::string_view source);
  // Parse() of a file of at most 1 MiB.
  static absl::StatusOr<TokenTable> Load(const std::string& path);

  // The principal `token` belongs to, or nullptr.
  const Principal* Authenticate(absl::string_view token) const;

  size_t size() const { return entries_.size(); }

  // Shorter tokens are refused: 32 hex digits are 128 bits of randomness
  // (`openssl rand -hex 32` gives 64 digits, 256 bits).
  static constexpr size_t kMinTokenBytes = 32;

 private:
  struct Entry {
    std::array<uint8_t, 32> token_sha256;
    Principal principal;
  };
  std::vector<Entry> entries_;
};

// A new random token (64 hex digits), for `pshardctl local` and tests.
absl::StatusOr<std::string> NewToken();

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_TOKENS_H_
