#include "cli/export_command.h"

#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "checkpoint/export.h"
#include "cli/commands.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pshard::cli {
namespace {

constexpr absl::string_view kExportHelp =
    "usage: pshardctl export CHECKPOINT OUT.safetensors [FLAGS]\n\n"
    "Writes a checkpoint's full parameters (no optimizer state) to one "
    "safetensors file, sorted by name, after verifying the manifest (sizes "
    "and SHA-256 of every shard). CHECKPOINT is a step directory "
    "(<dir>/step-<N>) or a job's checkpoint directory (then its latest "
    "complete checkpoint). Streamed shard by shard: memory stays bounded by "
    "the largest tensor. Needs no coordinator. The output is the same "
    "whatever world size the checkpoint was written at.\n\n"
    "Flags:\n"
    "  --output=table|json      output format (default table)\n";

std::string UserPath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* base = std::getenv("BUILD_WORKING_DIRECTORY");
  return (base != nullptr && base[0] != '\0') ? absl::StrCat(base, "/", path)
                                              : path;
}

}  // namespace

int ExportMain(int argc, char** argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> positional;
  OutputFormat format = OutputFormat::kTable;
  for (int i = 2; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      out << kExportHelp;
      return kExitOk;
    }
    if (absl::ConsumePrefix(&arg, "--output=")) {
      absl::StatusOr<OutputFormat> parsed = ParseOutputFormat(arg);
      if (!parsed.ok()) {
        PrintError(err, parsed.status());
        return kExitUsage;
      }
      format = *parsed;
      continue;
    }
    if (absl::StartsWith(arg, "-") && arg != "-") {
      err << "pshardctl: export: unknown flag " << arg
          << " (see pshardctl export --help)\n";
      return kExitUsage;
    }
    positional.emplace_back(arg);
  }
  if (positional.size() != 2) {
    err << "pshardctl: usage: pshardctl export CHECKPOINT OUT.safetensors\n";
    return kExitUsage;
  }
  const std::string checkpoint = UserPath(positional[0]);
  const std::string output = UserPath(positional[1]);
  absl::StatusOr<checkpoint::ExportResult> result =
      checkpoint::ExportParameters(checkpoint, output);
  if (!result.ok()) {
    PrintError(err, result.status());
    // A refused checkpoint is an error of the data, not of the command line.
    return kExitError;
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
  return kExitOk;
}

}  // namespace pshard::cli
