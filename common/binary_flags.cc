#include "common/binary_flags.h"

#include <string>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"

namespace pshard {

void SetUpBinaryFlags(absl::string_view program, absl::string_view usage,
                      absl::string_view main_file,
                      std::vector<std::string> shared_flag_files) {
  absl::SetProgramUsageMessage(usage);
  // Abseil hands the help filters each flag's file as its macro saw __FILE__
  // (e.g. "server/main.cc"), possibly with a leading "./".
  shared_flag_files.push_back(std::string(main_file));
  auto in_main_file = [files = std::move(shared_flag_files)](
                          absl::string_view file) {
    for (const std::string& f : files) {
      if (file == f || absl::EndsWith(file, absl::StrCat("/", f))) return true;
    }
    return false;
  };
  absl::FlagsUsageConfig config;
  config.contains_help_flags = in_main_file;
  config.contains_helpshort_flags = in_main_file;
  config.version_string = [name = std::string(program)] {
    return VersionLine(name);
  };
  absl::SetFlagsUsageConfig(config);
}

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", kPshardVersion, "\n");
}

}  // namespace pshard
