// The access files of one cluster, kept in one directory: a token file
// (tokens as digests), an identity file, and each token principal's own
// token in <name>.token. How `pshardctl local` hands out credentials, and
// how multi-process tests run a cluster with access control.
#ifndef PSHARD_SECURITY_ACCESS_DIRECTORY_H_
#define PSHARD_SECURITY_ACCESS_DIRECTORY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "security/access_policy.h"
#include "security/tokens.h"

namespace pshard::security {

class AccessDirectory {
 public:
  // Files go to `dir`, which must exist (a CertificateDirectory's, mode
  // 0700, serves).
  explicit AccessDirectory(std::string dir) : dir_(std::move(dir)) {}

  // A new token for principal `name` with `roles`, written (mode 0600) to
  // dir/<name>.token; returns that path. The token file (Write) holds only
  // its digest.
  absl::StatusOr<std::string> AddToken(const std::string& name,
                                       const std::vector<Role>& roles);
  // A client certificate with common name `name` gets `roles`.
  void AddIdentity(const std::string& name, const std::vector<Role>& roles);

  // Writes dir/tokens and dir/identities (replacing them: a server reloads
  // them only at its start).
  absl::Status Write() const;

  // The server flags' settings (--auth_tokens, --auth_identities); an
  // identity file only once an identity was added.
  AccessSettings settings() const;

 private:
  std::string dir_;
  std::vector<std::string> token_lines_;
  std::vector<std::string> identity_lines_;
};

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_ACCESS_DIRECTORY_H_
