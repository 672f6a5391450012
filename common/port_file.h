// Port files: how a process started with --listen=HOST:0 tells whoever
// started it which port it got (the coordinator and worker binaries write
// one with --port_file; pshardctl local and the tests read it).
#ifndef PSHARD_COMMON_PORT_FILE_H_
#define PSHARD_COMMON_PORT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pshard {

// Writes `port` to `path` atomically (a temporary file in the same directory,
// then rename), so a reader never sees a partial number.
absl::Status WritePortFile(const std::string& path, int port);

// The port in `path`. NotFound while the file does not exist or does not
// hold a port in 1..65535 yet.
absl::StatusOr<int> ReadPortFile(const std::string& path);

}  // namespace pshard

#endif  // PSHARD_COMMON_PORT_FILE_H_
