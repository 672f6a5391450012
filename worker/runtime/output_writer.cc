#include "worker/runtime/output_writer.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/io/safetensors.h"

namespace pshard::worker {

std::string JobOutputPath(const std::string& output_dir) {
  return output_dir + "/params.safetensors";
}

absl::StatusOr<std::string> WriteJobOutput(
    const std::string& output_dir, const std::vector<ParameterInfo>& parameters,
    const std::vector<std::vector<float>>& values) {
  if (parameters.size() != values.size()) {
    return absl::InternalError(absl::StrCat("output of ", parameters.size(),
                                            " parameters given ",
                                            values.size(), " value arrays"));
  }
  // Create the directory (one level) if needed; an existing one is fine.
  if (::mkdir(output_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create output directory ",
                                            output_dir, ": ",
                                            std::strerror(errno)));
  }
  std::vector<SafetensorsTensorView> views;
  views.reserve(parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    const ParameterInfo& p = parameters[i];
    std::vector<int64_t> shape =
        p.shape.empty() ? std::vector<int64_t>{p.numel} : p.shape;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (numel != static_cast<int64_t>(values[i].size())) {
      return absl::InternalError(absl::StrCat(
          "parameter ", p.name, " has ", values[i].size(),
          " values for its shape of ", numel));
    }
    views.push_back(SafetensorsTensorView{p.name, std::move(shape), values[i]});
  }
  std::string path = JobOutputPath(output_dir);
  RETURN_IF_ERROR(WriteSafetensorsAtomic(path, views));
  return path;
}

}  // namespace pshard::worker
