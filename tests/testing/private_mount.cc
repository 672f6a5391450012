#include "tests/testing/private_mount.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pshard::testing {

absl::Status PrivateMountNamespace() {
  if (::unshare(CLONE_NEWNS) != 0 ||
      ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a private mount namespace needs CAP_SYS_ADMIN: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status MountTmpfs(const std::string& dir, const std::string& size) {
  if (::mkdir(dir.c_str(), 0755) != 0) {
    return absl::InternalError(
        absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
  }
  const std::string data = absl::StrCat("size=", size);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, data.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("mount tmpfs (", data, ") on ",
                                            dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace pshard::testing
