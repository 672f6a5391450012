#include "worker/runtime/program_failure.h"

#include "absl/strings/str_cat.h"
#include "checkpoint/file.h"
#include "google/protobuf/util/json_util.h"
#include "worker/runtime/program_log.h"
#include "worker/runtime/result_reporter.h"

namespace pshard::worker {
namespace {

constexpr int64_t kMaxFailureFileBytes = 64 << 10;
// The error kept: what a ReportResultRequest carries, with room to spare.
constexpr size_t kMaxErrorBytes = 16 << 10;

}  // namespace

std::string ProgramFailurePath(absl::string_view log_dir,
                               absl::string_view job_id, int rank) {
  std::string path = ProgramLogPath(log_dir, job_id, rank);
  path.resize(path.size() - (sizeof(".log") - 1));
  return absl::StrCat(path, ".error.json");
}

absl::Status WriteProgramFailure(const std::string& path,
                                 const absl::Status& failure) {
  v1::ReportResultRequest report;
  report.set_cause(FailureCauseOf(failure));
  report.set_error(std::string(failure.message()).substr(0, kMaxErrorBytes));
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(report, &json);
  if (!printed.ok()) {
    return absl::InternalError(absl::StrCat("printing the failure: ",
                                            std::string(printed.message())));
  }
  return checkpoint::WriteFileAtomically(path, json);
}

std::optional<ProgramFailure> ReadProgramFailure(const std::string& path) {
  absl::StatusOr<std::string> json =
      checkpoint::ReadSmallFile(path, kMaxFailureFileBytes);
  if (!json.ok()) return std::nullopt;
  v1::ReportResultRequest report;
  if (!google::protobuf::util::JsonStringToMessage(*json, &report).ok() ||
      !v1::FailureCause_IsValid(report.cause()) ||
      report.cause() == v1::FAILURE_CAUSE_UNSPECIFIED) {
    return std::nullopt;
  }
  ProgramFailure failure;
  failure.cause = report.cause();
  failure.error = report.error().substr(0, kMaxErrorBytes);
  return failure;
}

}  // namespace pshard::worker
