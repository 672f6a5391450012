#include "common/logging.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pshard {
namespace {

void AppendJsonString(std::string& out, absl::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x",
                                static_cast<unsigned char>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

const char* LevelName(google::LogSeverity severity) {
  switch (severity) {
    case google::GLOG_INFO: return "info";
    case google::GLOG_WARNING: return "warning";
    case google::GLOG_ERROR: return "error";
    default: return "fatal";
  }
}

// Writes each line glog accepts to stderr as one JSON object. glog calls
// send() under its own lock, one line at a time; the line goes out in one
// write() so lines of several processes sharing a pipe do not interleave.
class JsonStderrSink : public google::LogSink {
 public:
  void set_program(absl::string_view program) {
    program_ = std::string(program);
  }

  void send(google::LogSeverity severity, const char* /*full_filename*/,
            const char* base_filename, int line,
            const google::LogMessageTime& time, const char* message,
            size_t message_len) override {
    std::string out = JsonLogLine(
        absl::FromUnixMicros(int64_t{time.timestamp()} * 1000000 +
                             time.usec()),
        LevelName(severity), program_, base_filename, line,
        absl::string_view(message, message_len));
    out.push_back('\n');
    size_t written = 0;
    while (written < out.size()) {
      const ssize_t n =
          ::write(STDERR_FILENO, out.data() + written, out.size() - written);
      if (n <= 0) break;  // nowhere else to say it
      written += static_cast<size_t>(n);
    }
  }

 private:
  std::string program_;
};

// glog is process-wide; so is what InitLogging set up in it.
struct LoggingState {
  std::string program;  // glog keeps a pointer to it
  JsonStderrSink json_sink;
  bool initialised = false;
  bool sink_added = false;
};

LoggingState& State() {
  static LoggingState* state = new LoggingState;
  return *state;
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_level: must be debug, info, warning or error, got \"", name,
      "\""));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_format: must be text or json, got \"", name, "\""));
}

void InitLogging(absl::string_view program, LogLevel level, LogFormat format) {
  LoggingState& state = State();
  if (!state.initialised) {
    state.program = std::string(program);
    google::InitGoogleLogging(state.program.c_str());
    state.initialised = true;
  }
  // No log files in any mode: stderr only.
  for (int s = google::GLOG_INFO; s < google::NUM_SEVERITIES; ++s) {
    google::SetLogDestination(s, "");
  }
  switch (level) {
    case LogLevel::kDebug:
      FLAGS_minloglevel = google::GLOG_INFO;
      FLAGS_v = 1;
      break;
    case LogLevel::kInfo:
      FLAGS_minloglevel = google::GLOG_INFO;
      FLAGS_v = 0;
      break;
    case LogLevel::kWarning:
      FLAGS_minloglevel = google::GLOG_WARNING;
      FLAGS_v = 0;
      break;
    case LogLevel::kError:
      FLAGS_minloglevel = google::GLOG_ERROR;
      FLAGS_v = 0;
      break;
  }
  state.json_sink.set_program(program);
  FLAGS_colorlogtostderr = false;
  if (format == LogFormat::kText) {
    if (state.sink_added) {
      google::RemoveLogSink(&state.json_sink);
      state.sink_added = false;
    }
    FLAGS_logtostderr = true;
  } else {
    // glog itself writes nowhere (no files, nothing reaches the stderr
    // threshold); the sink writes the lines.
    FLAGS_logtostderr = false;
    FLAGS_alsologtostderr = false;
    FLAGS_stderrthreshold = google::NUM_SEVERITIES;
    if (!state.sink_added) {
      google::AddLogSink(&state.json_sink);
      state.sink_added = true;
    }
  }
}

std::string JsonLogLine(absl::Time time, absl::string_view level,
                        absl::string_view program, absl::string_view file,
                        int line, absl::string_view msg) {
  std::string out = "{\"time\":";
  AppendJsonString(out, absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", time,
                                         absl::UTCTimeZone()));
  out += ",\"level\":";
  AppendJsonString(out, level);
  out += ",\"program\":";
  AppendJsonString(out, program);
  out += ",\"file\":";
  AppendJsonString(out, file);
  absl::StrAppend(&out, ",\"line\":", line, ",\"msg\":");
  AppendJsonString(out, msg);
  out.push_back('}');
  return out;
}

}  // namespace pshard
