// The logging flags every pshard binary takes (--log_level, --log_format),
// defined once here; InitLoggingFromFlags turns them into InitLogging.
#ifndef PSHARD_COMMON_LOGGING_FLAGS_H_
#define PSHARD_COMMON_LOGGING_FLAGS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pshard {

// The file that defines the flags, for SetUpBinaryFlags (so --help lists
// them beside the binary's own).
inline constexpr absl::string_view kLoggingFlagsFile =
    "common/logging_flags.cc";

// InitLogging(program, --log_level, --log_format). InvalidArgument for a
// value neither flag takes (a usage error: the caller prints it and exits 2);
// logging is then left as it was.
absl::Status InitLoggingFromFlags(absl::string_view program);

}  // namespace pshard

#endif  // PSHARD_COMMON_LOGGING_FLAGS_H_
