#include "common/logging_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/logging.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, log_level, "info",
          "least severe log lines written to stderr: debug, info, warning or "
          "error");
ABSL_FLAG(std::string, log_format, "text",
          "stderr log lines as glog's text (\"I20261204 02:50:01.123456 ...\") "
          "or as one JSON object a line (json: time, level, program, file, "
          "line, msg)");

namespace pshard {

absl::Status InitLoggingFromFlags(absl::string_view program) {
  ASSIGN_OR_RETURN(const LogLevel level,
                   ParseLogLevel(absl::GetFlag(FLAGS_log_level)));
  ASSIGN_OR_RETURN(const LogFormat format,
                   ParseLogFormat(absl::GetFlag(FLAGS_log_format)));
  InitLogging(program, level, format);
  return absl::OkStatus();
}

}  // namespace pshard
