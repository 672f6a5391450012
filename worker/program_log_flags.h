// pshard-worker's flags for program jobs' output files (--log_dir,
// --log_max_bytes). They live apart from worker/main.cc because glog's
// header declares a FLAGS_log_dir of its own, which an Abseil flag of that
// name in the same file would collide with.
#ifndef PSHARD_WORKER_PROGRAM_LOG_FLAGS_H_
#define PSHARD_WORKER_PROGRAM_LOG_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace pshard::worker {

// The file that defines the flags, for SetUpBinaryFlags.
inline constexpr absl::string_view kProgramLogFlagsFile =
    "worker/program_log_flags.cc";

// --log_dir as given (empty: the caller's default).
std::string ProgramLogDirFlag();
// --log_max_bytes as given (not validated).
int64_t ProgramLogMaxBytesFlag();

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_PROGRAM_LOG_FLAGS_H_
