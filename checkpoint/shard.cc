#include "checkpoint/shard.h"

#include <algorithm>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pshard::checkpoint {
namespace {

std::string ParameterListJson(absl::Span<const ParameterTensors> parameters) {
  google::protobuf::Value list;
  // Set even when empty: a rank that owns no parameter (more ranks than
  // buckets) writes "[]", not an unset value.
  google::protobuf::ListValue* names = list.mutable_list_value();
  for (const ParameterTensors& p : parameters) {
    names->add_values()->set_string_value(p.name);
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

// The kMetaSlices object of a shard's sliced parameters (value and every
// state tensor); empty when none is sliced.
std::string SlicesJson(absl::Span<const ParameterTensors> parameters) {
  google::protobuf::Struct slices;
  auto add = [&](const std::string& name, const TensorSlice& slice) {
    google::protobuf::Struct& entry =
        *(*slices.mutable_fields())[name].mutable_struct_value();
    (*entry.mutable_fields())["offset"].set_number_value(
        static_cast<double>(slice.offset));
    google::protobuf::ListValue* shape =
        (*entry.mutable_fields())["shape"].mutable_list_value();
    for (int64_t d : slice.shape) {
      shape->add_values()->set_number_value(static_cast<double>(d));
    }
  };
  for (const ParameterTensors& p : parameters) {
    if (!p.slice.has_value()) continue;
    add(p.name, *p.slice);
    for (const auto& [state_name, unused] : p.state) {
      add(StateTensorName(p.name, state_name), *p.slice);
    }
  }
  if (slices.fields().empty()) return "";
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(slices, &json);
  return json;
}

// A JSON number that is a whole number in [0, 2^52].
std::optional<int64_t> WholeNumber(const google::protobuf::Value& v) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue) return std::nullopt;
  const double d = v.number_value();
  if (!(d >= 0 && d <= static_cast<double>(int64_t{1} << 52)) ||
      d != static_cast<double>(static_cast<int64_t>(d))) {
    return std::nullopt;
  }
  return static_cast<int64_t>(d);
}

// The shard's kMetaSlices, by tensor name (empty when it has none).
absl::StatusOr<std::map<std::string, TensorSlice>> ParseSlices(
    const SafetensorsReader& shard) {
  std::map<std::string, TensorSlice> out;
  auto it = shard.metadata().find(std::string(kMetaSlices));
  if (it == shard.metadata().end()) return out;
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(shard.path(), ": __metadata__ '",
                                            kMetaSlices, "' ", why));
  };
  google::protobuf::Struct slices;
  if (!google::protobuf::util::JsonStringToMessage(
           google::protobuf::StringPiece(it->second.data(), it->second.size()),
           &slices)
           .ok()) {
    return bad("is not a JSON object");
  }
  for (const auto& [name, value] : slices.fields()) {
    const TensorInfo* info = shard.Find(name);
    if (info == nullptr) return bad(absl::StrCat("names '", name, "', which the file does not hold"));
    const auto& fields = value.struct_value().fields();
    auto offset = fields.find("offset");
    auto shape = fields.find("shape");
    if (value.kind_case() != google::protobuf::Value::kStructValue ||
        offset == fields.end() || shape == fields.end() ||
        !WholeNumber(offset->second).has_value() ||
        shape->second.kind_case() != google::protobuf::Value::kListValue) {
      return bad(absl::StrCat("has no whole offset and shape for '", name, "'"));
    }
    TensorSlice slice;
    slice.offset = *WholeNumber(offset->second);
    for (const auto& d : shape->second.list_value().values()) {
      if (!WholeNumber(d).has_value()) {
        return bad(absl::StrCat("gives '", name, "' a shape that is not whole numbers"));
      }
      slice.shape.push_back(*WholeNumber(d));
    }
    if (info->shape.size() != 1) {
      return bad(absl::StrCat("declares '", name, "' a slice, but it is not 1-D"));
    }
    out.emplace(name, std::move(slice));
  }
  return out;
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
    if (!p.slice.has_value()) continue;
    ASSIGN_OR_RETURN(
        const int64_t whole,
        CheckedNumel(p.slice->shape, DTypeSize(p.value.dtype), int64_t{1} << 52,
                     absl::StrCat("the whole of sliced parameter '", p.name, "'")));
    auto in_whole = [&](const std::string& name, const TensorRef& t) {
      if (t.shape.size() != 1 || p.slice->offset < 0 ||
          p.slice->offset + t.shape[0] > whole) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, "': a slice must be 1-D and inside its ", whole,
            "-element parameter; got shape [", absl::StrJoin(t.shape, ", "),
            "] at offset ", p.slice->offset));
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(in_whole(p.name, p.value));
    for (const auto& [state_name, tensor] : p.state) {
      RETURN_IF_ERROR(in_whole(StateTensorName(p.name, state_name), tensor));
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

absl::Status CheckProgramStateSize(int64_t bytes) {
  if (bytes <= kMaxProgramStateBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("program state of ", bytes, " bytes: at most ",
                   kMaxProgramStateBytes, " bytes"));
}

absl::StatusOr<ShardFileInfo> CheckpointWriter::WriteShard(
    int64_t step, absl::Span<const ParameterTensors> parameters,
    const std::optional<std::string>& program_state) const {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint step ", step, " is negative"));
  }
  if (program_state.has_value()) {
    RETURN_IF_ERROR(
        CheckProgramStateSize(static_cast<int64_t>(program_state->size())));
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
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {std::string(kMetaFormat), std::string(kCheckpointFormat)},
      {std::string(kMetaStep), absl::StrCat(step)},
      {std::string(kMetaSpecFingerprint), spec_fingerprint_},
      {std::string(kMetaRank), absl::StrCat(rank_)},
      {std::string(kMetaWorldSize), absl::StrCat(world_size_)},
      {std::string(kMetaParameters), ParameterListJson(parameters)},
  };
  if (std::string slices = SlicesJson(parameters); !slices.empty()) {
    metadata.emplace(std::string(kMetaSlices), std::move(slices));
  }
  if (program_state.has_value()) {
    metadata.emplace(std::string(kMetaProgramState),
                     absl::Base64Escape(*program_state));
  }
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
    ASSIGN_OR_RETURN(const auto slices, ParseSlices(*shard));
    for (const TensorInfo& info : shard->tensors()) {
      auto slice = slices.find(info.name);
      if (slice != slices.end()) {
        SlicedTensor& sliced = sliced_[info.name];
        if (sliced.slices.empty()) {
          sliced.whole.name = info.name;
          sliced.whole.dtype = info.dtype;
          sliced.whole.shape = slice->second.shape;
        } else if (sliced.whole.dtype != info.dtype ||
                   sliced.whole.shape != slice->second.shape) {
          return absl::DataLossError(absl::StrCat(
              "the slices of tensor '", info.name, "' in ",
              sliced.slices[0].shard->path(), " and ", shard->path(),
              " disagree on its dtype or shape"));
        }
        sliced.slices.push_back({shard.get(), &info, slice->second.offset});
        continue;
      }
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
  // Each sliced tensor: its slices tile it, and no shard holds it whole.
  for (auto& [name, sliced] : sliced_) {
    if (auto whole = index_.find(name); whole != index_.end()) {
      return absl::DataLossError(absl::StrCat(
          "tensor '", name, "' is whole in ", whole->second.shard->path(),
          " and sliced in ", sliced.slices[0].shard->path()));
    }
    ASSIGN_OR_RETURN(sliced.whole.numel,
                     CheckedNumel(sliced.whole.shape, DTypeSize(sliced.whole.dtype),
                                  int64_t{1} << 52,
                                  absl::StrCat("sliced tensor '", name, "'")));
    std::sort(sliced.slices.begin(), sliced.slices.end(),
              [](const Slice& a, const Slice& b) { return a.offset < b.offset; });
    int64_t next = 0;
    for (const Slice& slice : sliced.slices) {
      if (slice.offset != next) {
        return absl::DataLossError(absl::StrCat(
            "the slices of tensor '", name, "' do not tile it: elements from ",
            std::min(next, slice.offset), " are ",
            slice.offset > next ? "missing" : "in two slices", " (at ",
            slice.shard->path(), ")"));
      }
      next += slice.info->numel;
    }
    if (next != sliced.whole.numel) {
      return absl::DataLossError(absl::StrCat(
          "the slices of tensor '", name, "' cover ", next, " of its ",
          sliced.whole.numel, " elements"));
    }
    sliced.whole.end = sliced.whole.numel * DTypeSize(sliced.whole.dtype);
    index_.emplace(name, Location{nullptr, &sliced.whole});
  }
  // A sliced parameter is listed by every shard that holds a slice of it.
  std::sort(parameter_names_.begin(), parameter_names_.end());
  parameter_names_.erase(
      std::unique(parameter_names_.begin(), parameter_names_.end()),
      parameter_names_.end());
  return absl::OkStatus();
}

absl::StatusOr<std::map<int, std::string>> ShardReader::ProgramStates() const {
  std::map<int, std::string> states;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const auto& metadata = shards_[i]->metadata();
    auto it = metadata.find(std::string(kMetaProgramState));
    if (it == metadata.end()) continue;
    std::string bytes;
    if (!absl::Base64Unescape(it->second, &bytes)) {
      return absl::DataLossError(absl::StrCat(
          shards_[i]->path(), ": its ", kMetaProgramState, " is not base64"));
    }
    states[manifest_.files[i].rank] = std::move(bytes);
  }
  return states;
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
  if (where.shard != nullptr) return where.shard->ReadInto(*where.info, out);
  if (static_cast<int64_t>(out.size()) != where.info->byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' is ", where.info->byte_size(), " bytes, not ",
        out.size()));
  }
  const int64_t element = DTypeSize(where.info->dtype);
  for (const Slice& slice : sliced_.find(name)->second.slices) {
    RETURN_IF_ERROR(slice.shard->ReadInto(
        *slice.info, out.subspan(slice.offset * element, slice.info->byte_size())));
  }
  return absl::OkStatus();
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
        where.shard != nullptr ? where.shard->path() : step_dir_,
        ": tensor '", name, "' is ", DTypeName(where.info->dtype),
        ", not F32"));
  }
  std::vector<float> values(static_cast<size_t>(where.info->numel));
  RETURN_IF_ERROR(ReadInto(
      name, absl::MakeSpan(reinterpret_cast<char*>(values.data()),
                           values.size() * sizeof(float))));
  return values;
}

}  // namespace pshard::checkpoint
