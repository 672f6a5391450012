// WriteJobOutput: a job's final parameters as <output_dir>/params.safetensors,
// written atomically (readers see the previous file or the complete new one).
// Rank 0 writes it once the last step and the final barrier are done.
#ifndef PSHARD_WORKER_RUNTIME_OUTPUT_WRITER_H_
#define PSHARD_WORKER_RUNTIME_OUTPUT_WRITER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

// The file WriteJobOutput writes in `output_dir`.
std::string JobOutputPath(const std::string& output_dir);

// Writes `values[i]` as tensor `parameters[i].name` with its shape ({numel}
// when it has none) to JobOutputPath(output_dir), creating `output_dir`
// (one level) if needed, and returns the path. Internal: the directory
// cannot be created, a parameter's values do not match its shape (or the
// counts differ), or an I/O error; InvalidArgument: empty or duplicate
// names.
absl::StatusOr<std::string> WriteJobOutput(
    const std::string& output_dir, const std::vector<ParameterInfo>& parameters,
    const std::vector<std::vector<float>>& values);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_OUTPUT_WRITER_H_
