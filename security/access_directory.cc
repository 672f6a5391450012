#include "security/access_directory.h"

#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"

namespace pshard::security {
namespace {

std::string RoleList(const std::vector<Role>& roles) {
  return absl::StrJoin(roles, ",", [](std::string* out, Role role) {
    absl::StrAppend(out, RoleName(role));
  });
}

}  // namespace

absl::StatusOr<std::string> AccessDirectory::AddToken(
    const std::string& name, const std::vector<Role>& roles) {
  ASSIGN_OR_RETURN(std::string token, NewToken());
  const std::string path = absl::StrCat(dir_, "/", name, ".token");
  RETURN_IF_ERROR(checkpoint::WriteFileAtomically(path, token + "\n"));
  if (chmod(path.c_str(), 0600) != 0) {
    return checkpoint::ErrnoError("chmod", path, errno);
  }
  token_lines_.push_back(
      absl::StrCat(TokenDigest(token), " ", name, " ", RoleList(roles)));
  return path;
}

void AccessDirectory::AddIdentity(const std::string& name,
                                  const std::vector<Role>& roles) {
  identity_lines_.push_back(absl::StrCat(name, " ", RoleList(roles)));
}

absl::Status AccessDirectory::Write() const {
  const AccessSettings files = settings();
  RETURN_IF_ERROR(checkpoint::WriteFileAtomically(
      files.tokens_file,
      absl::StrCat("# token name roles\n", absl::StrJoin(token_lines_, "\n"),
                   "\n")));
  if (!files.identities_file.empty()) {
    RETURN_IF_ERROR(checkpoint::WriteFileAtomically(
        files.identities_file,
        absl::StrCat("# certificate-common-name roles\n",
                     absl::StrJoin(identity_lines_, "\n"), "\n")));
  }
  return absl::OkStatus();
}

AccessSettings AccessDirectory::settings() const {
  AccessSettings s;
  s.tokens_file = dir_ + "/tokens";
  if (!identity_lines_.empty()) s.identities_file = dir_ + "/identities";
  return s;
}

}  // namespace pshard::security
