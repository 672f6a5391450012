// The process's limit on open file descriptors (RLIMIT_NOFILE). A worker's
// TCP mesh holds two sockets per peer (a Gloo context per direction, a
// socket per pair) and the coordinator a gRPC connection per worker, so a
// job of a few hundred ranks or a pool of a thousand workers passes the
// soft limit of 1,024 that containers commonly start with (containerd 2
// and systemd give soft 1,024, hard 524,288). Binaries raise the soft limit
// to the hard one when they start, as Go's runtime does, and the TCP mesh
// checks that its sockets fit before it opens any, so that a limit too low
// is an error that says so rather than an exception from Gloo midway.
#ifndef PSHARD_COMMON_OPEN_FILES_H_
#define PSHARD_COMMON_OPEN_FILES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard {

struct OpenFileLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;
};

// The limit now.
absl::StatusOr<OpenFileLimit> GetOpenFileLimit();

// Raises the soft limit to the hard one (never lowers it) and returns the
// limit after. Children started later inherit it.
absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit();

// What a binary's main() calls once logging is set up: RaiseOpenFileLimit,
// logging the limit ("open files: limit L"), or a warning if it failed (the
// binary goes on under the limit it has).
void RaiseOpenFileLimitAtStart();

// The descriptors this process has open (entries of /proc/self/fd).
absl::StatusOr<int64_t> CountOpenFiles();

// OK if `needed` more descriptors fit under the soft limit; otherwise
// ResourceExhausted naming `what`, the need, the limit and how to raise it.
absl::Status CheckOpenFileHeadroom(int64_t needed, absl::string_view what);

}  // namespace pshard

#endif  // PSHARD_COMMON_OPEN_FILES_H_
