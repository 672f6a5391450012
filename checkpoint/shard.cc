#include "checkpoint/shard.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pshard::checkpoint {
namespace {

std::string ParameterListJson(absl::Span<const ParameterTensors> parameters) {
  google::protobuf::Value list;
  // A rank that owns no parameter writes "[]", not "null".
  list.mutable_list_value();
  for (const ParameterTensors& p : parameters) {
    list.mutable_list_value()->add_values()->set_string_value(p.name);
  }
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(list, &json);
  return json;
}

absl::StatusOr<std::vector<std::string>> ParseParameterList(
    const SafetensorsReader& shard) {
  auto it = shard.metadata().find(std::string(kMetaParameters));
  if (it == shard.metadata().end()) {
    return absl::DataLossError(absl::StrCat(
        shard.path(), ": __metadata__ has no '", kMetaParameters, "'"));
  }
  google::protobuf::Value list;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(it->second.data(), it->second.size()), &list);
  if (!parsed.ok() || list.kind_case() != google::protobuf::Value::kListValue) {
    return absl::DataLossError(absl::StrCat(
        shard.path(), ": __metadata__ '", kMetaParameters,
        "' is not a JSON list of names"));
  }
  std::vector<std::string> names;
  for (const auto& v : list.list_value().values()) {
    if (v.kind_case() != google::protobuf::Value::kStringValue ||
        shard.Find(v.string_value()) == nullptr) {
      return absl::DataLossError(absl::StrCat(
          shard.path(), ": __metadata__ '", kMetaParameters,
          "' names a parameter the file does not hold"));
    }
    names.push_back(v.string_value());
  }
  return names;
}

absl::Status CheckMetadata(const SafetensorsReader& shard,
                           absl::string_view key, absl::string_view expected) {
  auto it = shard.metadata().find(std::string(key));
  if (it == shard.metadata().end() || it->second != expected) {
    return absl::DataLossError(absl::StrCat(
        shard.path(), ": __metadata__ '", key, "' is '",
        it == shard.metadata().end() ? "<missing>" : it->second,
        "' but the manifest says '", expected, "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckTensor(const std::string& name, const TensorRef& t) {
  ASSIGN_OR_RETURN(int64_t numel,
                   CheckedNumel(t.shape, DTypeSize(t.dtype),
                                int64_t{1} << 52, absl::StrCat("tensor '", name, "'")));
  if (numel * DTypeSize(t.dtype) != static_cast<int64_t>(t.bytes.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "': shape [", absl::StrJoin(t.shape, ", "), "] of ",
        DTypeName(t.dtype), " needs ", numel * DTypeSize(t.dtype),
        " bytes but ", t.bytes.size(), " were given"));
  }
  return absl::OkStatus();
}

}  // namespace

TensorRef FloatTensor(absl::Span<const float> data, std::vector<int64_t> shape) {
  if (shape.empty()) shape.push_back(static_cast<int64_t>(data.size()));
  return TensorRef{DType::kF32, std::move(shape),
                   absl::Span<const char>(reinterpret_cast<const char*>(data.data()),
                                          data.size() * sizeof(float))};
}

std::string StateTensorName(absl::string_view parameter,
                            absl::string_view state) {
  return absl::StrCat(parameter, ".", state);
}

absl::Status ValidateParameters(absl::Span<const ParameterTensors> parameters) {
  absl::flat_hash_set<std::string> names;
  auto add = [&](const std::string& name, const TensorRef& t) -> absl::Status {
    if (name.empty() || name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid tensor name '", name, "'"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' appears twice"));
    }
    return CheckTensor(name, t);
  };
  for (const ParameterTensors& p : parameters) {
    RETURN_IF_ERROR(add(p.name, p.value));
    for (const auto& [state_name, tensor] : p.state) {
      if (state_name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", p.name, "' has a state tensor with an empty name"));
      }
      RETURN_IF_ERROR(add(StateTensorName(p.name, state_name), tensor));
    }
  }
  return absl::OkStatus();
}

CheckpointWriter::CheckpointWriter(std::string root, int rank, int world_size,
                                   std::string spec_fingerprint)
    : root_(std::move(root)),
      rank_(rank),
      world_size_(world_size),
      spec_fingerprint_(std::move(spec_fingerprint)) {}

absl::StatusOr<CheckpointWriter> CheckpointWriter::Create(
    std::string root, int rank, int world_size, std::string spec_fingerprint) {
  if (root.empty()) {
    return absl::InvalidArgumentError("checkpoint directory is empty");
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint world_size ", world_size, " must be at least 1"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint rank ", rank, " outside [0, ", world_size, ")"));
  }
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return CheckpointWriter(std::move(root), rank, world_size,
                          std::move(spec_fingerprint));
}

absl::StatusOr<ShardFileInfo> CheckpointWriter::WriteShard(
    int64_t step, absl::Span<const ParameterTensors> parameters) const {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint step ", step, " is negative"));
  }
  // Names and sizes are checked before anything touches the disk.
  RETURN_IF_ERROR(ValidateParameters(parameters));
  std::vector<TensorSpec> specs;
  std::vector<absl::Span<const char>> data;
  for (const ParameterTensors& p : parameters) {
    specs.push_back({p.name, p.value.dtype, p.value.shape});
    data.push_back(p.value.bytes);
    for (const auto& [state_name, tensor] : p.state) {
      specs.push_back({StateTensorName(p.name, state_name), tensor.dtype,
                       tensor.shape});
      data.push_back(tensor.bytes);
    }
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {std::string(kMetaFormat), std::string(kCheckpointFormat)},
      {std::string(kMetaStep), absl::StrCat(step)},
      {std::string(kMetaSpecFingerprint), spec_fingerprint_},
      {std::string(kMetaRank), absl::StrCat(rank_)},
      {std::string(kMetaWorldSize), absl::StrCat(world_size_)},
      {std::string(kMetaParameters), ParameterListJson(parameters)},
  };
  RETURN_IF_ERROR(MakeDirectoryDurably(root_));
  const std::string dir = StepDirectory(root_, step);
  RETURN_IF_ERROR(MakeDirectoryDurably(dir));
  ShardFileInfo file;
  file.name = ShardFileName(rank_, world_size_);
  file.rank = rank_;
  ASSIGN_OR_RETURN(auto writer,
                   SafetensorsWriter::Create(absl::StrCat(dir, "/", file.name),
                                             std::move(specs), metadata));
  for (absl::Span<const char> bytes : data) {
    RETURN_IF_ERROR(writer->Append(absl::string_view(bytes.data(), bytes.size())));
  }
  ASSIGN_OR_RETURN(FileDigest digest, writer->Finish());
  file.size_bytes = digest.size_bytes;
  file.sha256 = std::move(digest.sha256);
  return file;
}

ShardReader::ShardReader(std::string step_dir, Manifest manifest,
                         std::vector<std::unique_ptr<SafetensorsReader>> shards)
    : step_dir_(std::move(step_dir)),
      manifest_(std::move(manifest)),
      shards_(std::move(shards)) {}

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Open(
    const std::string& step_dir, Verify verify) {
  Manifest manifest;
  if (verify == Verify::kSizesAndHashes) {
    ASSIGN_OR_RETURN(manifest, VerifyCheckpoint(step_dir));
  } else {
    ASSIGN_OR_RETURN(manifest, ReadManifest(step_dir));
  }
  std::vector<std::unique_ptr<SafetensorsReader>> shards;
  for (const ShardFileInfo& file : manifest.files) {
    ASSIGN_OR_RETURN(auto shard,
                     SafetensorsReader::Open(absl::StrCat(step_dir, "/", file.name)));
    if (shard->file_size() != file.size_bytes) {
      return absl::DataLossError(absl::StrCat(
          shard->path(), " has ", shard->file_size(),
          " bytes but the manifest says ", file.size_bytes));
    }
    RETURN_IF_ERROR(CheckMetadata(*shard, kMetaFormat, kCheckpointFormat));
    RETURN_IF_ERROR(CheckMetadata(*shard, kMetaStep, absl::StrCat(manifest.step)));
    RETURN_IF_ERROR(CheckMetadata(*shard, kMetaSpecFingerprint,
                                  manifest.spec_fingerprint));
    RETURN_IF_ERROR(CheckMetadata(*shard, kMetaRank, absl::StrCat(file.rank)));
    RETURN_IF_ERROR(CheckMetadata(*shard, kMetaWorldSize,
                                  absl::StrCat(manifest.world_size)));
    shards.push_back(std::move(shard));
  }
  std::unique_ptr<ShardReader> reader(
      new ShardReader(step_dir, std::move(manifest), std::move(shards)));
  RETURN_IF_ERROR(reader->Index());
  return reader;
}

absl::Status ShardReader::Index() {
  for (const auto& shard : shards_) {
    for (const TensorInfo& info : shard->tensors()) {
      auto [it, inserted] = index_.try_emplace(info.name, Location{shard.get(), &info});
      if (!inserted) {
        return absl::DataLossError(absl::StrCat(
            "tensor '", info.name, "' is in both ", it->second.shard->path(),
            " and ", shard->path()));
      }
    }
    ASSIGN_OR_RETURN(std::vector<std::string> names, ParseParameterList(*shard));
    for (std::string& name : names) parameter_names_.push_back(std::move(name));
  }
  std::sort(parameter_names_.begin(), parameter_names_.end());
  return absl::OkStatus();
}

ShardReader::Location ShardReader::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? Location{} : it->second;
}

absl::Status ShardReader::ReadInto(absl::string_view name,
                                   absl::Span<char> out) const {
  const Location where = Find(name);
  if (where.info == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", step_dir_, " has no tensor named '", name, "'"));
  }
  return where.shard->ReadInto(*where.info, out);
}

absl::StatusOr<std::vector<float>> ShardReader::ReadFloats(
    absl::string_view name) const {
  const Location where = Find(name);
  if (where.info == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", step_dir_, " has no tensor named '", name, "'"));
  }
  if (where.info->dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        where.shard->path(), ": tensor '", name, "' is ",
        DTypeName(where.info->dtype), ", not F32"));
  }
  std::vector<float> values(static_cast<size_t>(where.info->numel));
  RETURN_IF_ERROR(where.shard->ReadInto(
      *where.info, absl::MakeSpan(reinterpret_cast<char*>(values.data()),
                                  values.size() * sizeof(float))));
  return values;
}

}  // namespace pshard::checkpoint
