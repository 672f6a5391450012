#include "checkpoint/export.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/catalog.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/shard.h"
#include "common/status_macros.h"

namespace pshard::checkpoint {

absl::StatusOr<ExportResult> ExportParameters(const std::string& checkpoint,
                                              const std::string& out_path) {
  ASSIGN_OR_RETURN(CompleteCheckpoint resolved, ResolveCheckpoint(checkpoint));
  // ResolveCheckpoint verified the hashes just now.
  ASSIGN_OR_RETURN(auto reader, ShardReader::Open(resolved.step_dir,
                                                  ShardReader::Verify::kSizesOnly));
  std::vector<TensorSpec> specs;
  int64_t largest = 0;
  for (const std::string& name : reader->parameter_names()) {
    const TensorInfo& info = *reader->Find(name).info;
    specs.push_back({name, info.dtype, info.shape});
    largest = std::max(largest, info.byte_size());
  }
  const Manifest& manifest = reader->manifest();
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {std::string(kMetaStep), absl::StrCat(manifest.step)},
      {std::string(kMetaSpecFingerprint), manifest.spec_fingerprint},
  };
  ASSIGN_OR_RETURN(auto writer,
                   SafetensorsWriter::Create(out_path, specs, metadata));
  // One buffer, reused: the largest tensor is all that is ever in memory.
  std::unique_ptr<char[]> buffer(new char[std::max<int64_t>(largest, 1)]);
  for (const TensorSpec& spec : specs) {
    const TensorInfo& info = *reader->Find(spec.name).info;
    absl::Span<char> bytes(buffer.get(), static_cast<size_t>(info.byte_size()));
    RETURN_IF_ERROR(reader->ReadInto(spec.name, bytes));
    RETURN_IF_ERROR(writer->Append(absl::string_view(bytes.data(), bytes.size())));
  }
  ExportResult result;
  ASSIGN_OR_RETURN(result.file, writer->Finish());
  result.step_dir = resolved.step_dir;
  result.step = manifest.step;
  result.parameters = static_cast<int64_t>(specs.size());
  return result;
}

}  // namespace pshard::checkpoint
