// Process logging for pshard's binaries: glog's LOG(INFO|WARNING|ERROR) << ...
// (the spelling absl/log will have, so a later move is a rename), set up once
// by InitLogging to write to stderr only (containers collect it), at a
// minimum level, as glog's text lines or as JSON lines:
//
//   {"time":"2026-12-04T02:50:01.123456Z","level":"info",
//    "program":"pshard-coordinator","file":"coordinator.cc","line":281,
//    "msg":"job j-1: STARTING -> RUNNING (epoch 1): ..."}
//
// Levels: debug (VLOG(1) lines, which JSON shows as "info"), info, warning,
// error. What is logged where is in docs/user-guide.md ("Troubleshooting").
// Code that logs includes this header, not glog's, so the library is named in
// one place.
#ifndef PSHARD_COMMON_LOGGING_H_
#define PSHARD_COMMON_LOGGING_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "glog/logging.h"  // IWYU pragma: export

namespace pshard {

enum class LogLevel { kDebug, kInfo, kWarning, kError };
enum class LogFormat { kText, kJson };

// "debug", "info", "warning", "error". InvalidArgument names the value and
// the choices.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
// "text", "json". InvalidArgument as above.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// Sets the process's logging: glog initialised once for `program` (later
// calls only change level and format), no log files, lines below `level`
// dropped, each line to stderr in `format`. Not thread-safe against itself:
// call it from main() before threads start (tests may call it again).
void InitLogging(absl::string_view program, LogLevel level, LogFormat format);

// One JSON log line (no trailing newline) with the fields in the order above;
// `level` is "info", "warning", "error" or "fatal"; strings are escaped as
// JSON requires (quotes, backslashes, control characters as \n, \t or \u00XX;
// bytes >= 0x80 pass through, so UTF-8 stays UTF-8).
std::string JsonLogLine(absl::Time time, absl::string_view level,
                        absl::string_view program, absl::string_view file,
                        int line, absl::string_view msg);

}  // namespace pshard

#endif  // PSHARD_COMMON_LOGGING_H_
