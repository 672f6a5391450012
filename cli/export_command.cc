#include "cli/export_command.h"

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "checkpoint/export.h"
#include "cli/commands.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pshard::cli {

absl::Status ExportCheckpoint(const std::string& checkpoint,
                              const std::string& output, OutputFormat format,
                              std::ostream& out) {
  absl::StatusOr<checkpoint::ExportResult> result =
      checkpoint::ExportParameters(checkpoint, output);
  if (!result.ok()) {
    // A refused checkpoint is an error of the data, not of the command line.
    if (result.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::FailedPreconditionError(result.status().message());
    }
    return result.status();
  }
  if (format == OutputFormat::kJson) {
    google::protobuf::Struct json;
    auto& fields = *json.mutable_fields();
    fields["checkpoint"].set_string_value(result->step_dir);
    fields["step"].set_number_value(static_cast<double>(result->step));
    fields["parameters"].set_number_value(static_cast<double>(result->parameters));
    fields["output"].set_string_value(output);
    fields["size_bytes"].set_number_value(static_cast<double>(result->file.size_bytes));
    fields["sha256"].set_string_value(result->file.sha256);
    std::string text;
    (void)google::protobuf::util::MessageToJsonString(json, &text);
    out << text << "\n";
  } else {
    out << "exported " << result->parameters << " parameters of step "
        << result->step << " (" << result->step_dir << ") to " << output
        << ": " << result->file.size_bytes << " bytes, sha256 "
        << result->file.sha256 << "\n";
  }
  return absl::OkStatus();
}

}  // namespace pshard::cli
