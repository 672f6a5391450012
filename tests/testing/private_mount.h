// A mount namespace of the calling thread's own, and small tmpfs disks in
// it, for tests of full disks: the child processes a test starts inherit
// the namespace, and nothing outside the test sees its mounts. Needs
// CAP_SYS_ADMIN; tests skip, saying so, without it.
#ifndef PSHARD_TESTS_TESTING_PRIVATE_MOUNT_H_
#define PSHARD_TESTS_TESTING_PRIVATE_MOUNT_H_

#include <string>

#include "absl/status/status.h"

namespace pshard::testing {

// Unshares the mount namespace, with nothing propagating back to the host.
// PermissionDenied (naming the capability) when not allowed.
absl::Status PrivateMountNamespace();

// Creates directory `dir` and mounts a tmpfs of `size` (e.g. "1536k") on it.
// Internal naming the failing call.
absl::Status MountTmpfs(const std::string& dir, const std::string& size);

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_TESTING_PRIVATE_MOUNT_H_
