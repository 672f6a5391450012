#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pshard::checkpoint {
namespace {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this code assumes a little-endian host"
#endif

// Largest integer a JSON number (a double) holds exactly.
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

struct DTypeEntry {
  DType dtype;
  absl::string_view name;
  int64_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "BOOL", 1},      {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},          {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},      {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},        {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},        {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
};

const DTypeEntry& EntryOf(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];  // unreachable: every enumerator is in the table
}

absl::StatusOr<int64_t> ExactInteger(const google::protobuf::Value& value,
                                     absl::string_view what) {
  if (value.kind_case() != google::protobuf::Value::kNumberValue) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a number"));
  }
  const double d = value.number_value();
  if (!(d >= 0) || d > kMaxExactInteger || std::floor(d) != d) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a non-negative integer, got ", d));
  }
  return static_cast<int64_t>(d);
}

absl::StatusOr<TensorInfo> ParseEntry(const std::string& name,
                                      const google::protobuf::Value& value,
                                      int64_t data_size,
                                      absl::string_view source) {
  const std::string where = absl::StrCat(source, ": tensor '", name, "'");
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": a tensor has an empty name"));
  }
  if (value.kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": header entry is not an object"));
  }
  const auto& fields = value.struct_value().fields();
  for (const auto& [key, unused] : fields) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown header field '", key, "'"));
    }
  }
  auto dtype = fields.find("dtype");
  auto shape = fields.find("shape");
  auto offsets = fields.find("data_offsets");
  if (dtype == fields.end() || shape == fields.end() ||
      offsets == fields.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": header entry needs dtype, shape and data_offsets"));
  }
  if (dtype->second.kind_case() != google::protobuf::Value::kStringValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dtype is not a string"));
  }
  TensorInfo info;
  info.name = name;
  {
    auto parsed = ParseDType(dtype->second.string_value());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", parsed.status().message()));
    }
    info.dtype = *parsed;
  }
  const int64_t element_size = DTypeSize(info.dtype);
  if (shape->second.kind_case() != google::protobuf::Value::kListValue ||
      shape->second.list_value().values_size() > kMaxSafetensorsRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": shape must be a list of at most ", kMaxSafetensorsRank,
        " integers"));
  }
  for (const auto& dim_value : shape->second.list_value().values()) {
    ASSIGN_OR_RETURN(int64_t dim,
                     ExactInteger(dim_value, absl::StrCat(where, ": shape")));
    info.shape.push_back(dim);
  }
  // numel is bounded by the data section, so the product cannot overflow.
  {
    auto numel = CheckedNumel(info.shape, element_size, data_size, where);
    if (!numel.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape [", absl::StrJoin(info.shape, ", "),
                       "] is larger than the file's data section of ",
                       data_size, " bytes (a truncated file?)"));
    }
    info.numel = *numel;
  }

  if (offsets->second.kind_case() != google::protobuf::Value::kListValue ||
      offsets->second.list_value().values_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": data_offsets must be [begin, end]"));
  }
  ASSIGN_OR_RETURN(info.begin,
                   ExactInteger(offsets->second.list_value().values(0),
                                absl::StrCat(where, ": data_offsets[0]")));
  ASSIGN_OR_RETURN(info.end,
                   ExactInteger(offsets->second.list_value().values(1),
                                absl::StrCat(where, ": data_offsets[1]")));
  if (info.begin > info.end || info.end > data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": data_offsets [", info.begin, ", ", info.end,
        "] outside the data section of ", data_size,
        " bytes (a truncated file?)"));
  }
  if (info.end - info.begin != info.numel * element_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": data_offsets [", info.begin, ", ", info.end, "] hold ",
        info.end - info.begin, " bytes but shape [",
        absl::StrJoin(info.shape, ", "), "] of ", DTypeName(info.dtype),
        " needs ", info.numel * element_size));
  }
  return info;
}

// Validates the JSON header against a data section of `data_size` bytes.
absl::StatusOr<SafetensorsHeader> ParseHeader(absl::string_view json,
                                              int64_t data_size,
                                              absl::string_view source) {
  google::protobuf::Struct header;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &header);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": header is not a JSON object: ", parsed.ToString()));
  }
  SafetensorsHeader out;
  for (const auto& [name, value] : header.fields()) {
    if (name == "__metadata__") {
      if (value.kind_case() != google::protobuf::Value::kStructValue) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": __metadata__ is not an object"));
      }
      for (const auto& [key, v] : value.struct_value().fields()) {
        if (v.kind_case() != google::protobuf::Value::kStringValue) {
          return absl::InvalidArgumentError(absl::StrCat(
              source, ": __metadata__ value '", key, "' is not a string"));
        }
        out.metadata[key] = v.string_value();
      }
      continue;
    }
    ASSIGN_OR_RETURN(TensorInfo info, ParseEntry(name, value, data_size, source));
    out.tensors.push_back(std::move(info));
  }
  // Order by offset; the name breaks ties between empty tensors so the order
  // never depends on the JSON map's iteration order.
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return std::tie(a.begin, a.end, a.name) <
                     std::tie(b.begin, b.end, b.name);
            });
  int64_t covered = 0;
  for (size_t i = 0; i < out.tensors.size(); ++i) {
    const TensorInfo& t = out.tensors[i];
    if (i > 0 && t.begin < covered) {
      const TensorInfo& prev = out.tensors[i - 1];
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": tensors '", prev.name, "' [", prev.begin, ", ", prev.end,
          ") and '", t.name, "' [", t.begin, ", ", t.end, ") overlap"));
    }
    if (t.begin != covered) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": tensor '", t.name, "' starts at data offset ", t.begin,
          " but the previous data ends at ", covered,
          " (data must be contiguous)"));
    }
    covered = t.end;
  }
  if (covered != data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the tensors cover ", covered, " bytes but the data section has ",
        data_size, " (trailing bytes)"));
  }
  return out;
}

// Checks the 8-byte length prefix against the file size.
absl::StatusOr<int64_t> HeaderLength(const unsigned char prefix[8],
                                     int64_t file_size,
                                     absl::string_view source) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header length ", n, " exceeds the limit of ",
                     kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (static_cast<int64_t>(n) > file_size - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": truncated: header length ", n, " but only ",
                     file_size - 8, " bytes follow the length prefix"));
  }
  return static_cast<int64_t>(n);
}

absl::Status TooShort(int64_t size, absl::string_view source) {
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": truncated: ", size, " bytes, shorter than the length prefix"));
}

void AppendJsonString(std::string& out, absl::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

}  // namespace

absl::string_view DTypeName(DType dtype) { return EntryOf(dtype).name; }
int64_t DTypeSize(DType dtype) { return EntryOf(dtype).size; }

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  std::vector<absl::string_view> known;
  for (const DTypeEntry& e : kDTypes) known.push_back(e.name);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name, "' (known: ", absl::StrJoin(known, ", "), ")"));
}

absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape,
                                     int64_t element_size, int64_t max_bytes,
                                     absl::string_view what) {
  bool empty = false;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a negative dimension"));
    }
    empty = empty || dim == 0;
  }
  if (empty) return 0;
  // Stop as soon as the product passes what `max_bytes` holds, so it never
  // overflows.
  const int64_t max_numel = max_bytes / element_size;
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (numel > max_numel / dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": shape [", absl::StrJoin(shape, ", "), "] is too large"));
    }
    numel *= dim;
  }
  return numel;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsImage(
    absl::string_view bytes, absl::string_view source) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < 8) return TooShort(size, source);
  ASSIGN_OR_RETURN(
      int64_t header_len,
      HeaderLength(reinterpret_cast<const unsigned char*>(bytes.data()), size,
                   source));
  const int64_t data_start = 8 + header_len;
  ASSIGN_OR_RETURN(SafetensorsHeader header,
                   ParseHeader(bytes.substr(8, header_len), size - data_start,
                               source));
  header.data_start = data_start;
  return header;
}

SafetensorsReader::SafetensorsReader(std::string path, UniqueFd fd,
                                     int64_t file_size,
                                     SafetensorsHeader header)
    : path_(std::move(path)),
      fd_(std::move(fd)),
      file_size_(file_size),
      header_(std::move(header)) {
  for (size_t i = 0; i < header_.tensors.size(); ++i) {
    index_[header_.tensors[i].name] = i;
  }
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(OpenFile file, OpenRegularFile(path));
  UniqueFd fd = std::move(file.fd);
  const int64_t size = file.size;
  if (size < 8) return TooShort(size, path);
  unsigned char prefix[8];
  RETURN_IF_ERROR(PreadFully(fd.get(), prefix, 8, 0, path));
  ASSIGN_OR_RETURN(int64_t header_len, HeaderLength(prefix, size, path));
  std::string json(static_cast<size_t>(header_len), '\0');
  RETURN_IF_ERROR(PreadFully(fd.get(), json.data(), header_len, 8, path));
  const int64_t data_start = 8 + header_len;
  ASSIGN_OR_RETURN(SafetensorsHeader header,
                   ParseHeader(json, size - data_start, path));
  header.data_start = data_start;
  return std::unique_ptr<SafetensorsReader>(
      new SafetensorsReader(path, std::move(fd), size, std::move(header)));
}

const TensorInfo* SafetensorsReader::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

absl::Status SafetensorsReader::ReadInto(const TensorInfo& tensor,
                                         absl::Span<char> out) const {
  if (static_cast<int64_t>(out.size()) != tensor.byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor '", tensor.name, "' has ", tensor.byte_size(),
        " bytes but the buffer holds ", out.size()));
  }
  return PreadFully(fd_.get(), out.data(), tensor.byte_size(),
                    header_.data_start + tensor.begin, path_);
}

absl::StatusOr<std::string> SafetensorsReader::ReadBytes(
    absl::string_view name) const {
  const TensorInfo* tensor = Find(name);
  if (tensor == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  std::string bytes(static_cast<size_t>(tensor->byte_size()), '\0');
  RETURN_IF_ERROR(ReadInto(*tensor, absl::MakeSpan(bytes.data(), bytes.size())));
  return bytes;
}

absl::StatusOr<std::string> SerializeSafetensorsHeader(
    absl::Span<const TensorSpec> specs,
    const std::map<std::string, std::string>& metadata) {
  absl::flat_hash_set<absl::string_view> names;
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header.push_back(',');
      first = false;
      AppendJsonString(header, key);
      header.push_back(':');
      AppendJsonString(header, value);
    }
    header.push_back('}');
  }
  int64_t offset = 0;
  for (const TensorSpec& t : specs) {
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid tensor name '", t.name, "'"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    if (t.shape.size() > static_cast<size_t>(kMaxSafetensorsRank)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' has more than ", kMaxSafetensorsRank,
          " dimensions"));
    }
    const int64_t element_size = DTypeSize(t.dtype);
    ASSIGN_OR_RETURN(
        int64_t numel,
        CheckedNumel(t.shape, element_size,
                     static_cast<int64_t>(kMaxExactInteger) - offset,
                     absl::StrCat("tensor '", t.name, "'")));
    if (header.size() > 1) header.push_back(',');
    AppendJsonString(header, t.name);
    absl::StrAppend(&header, ":{\"dtype\":\"", DTypeName(t.dtype),
                    "\",\"shape\":[", absl::StrJoin(t.shape, ","),
                    "],\"data_offsets\":[", offset, ",",
                    offset + numel * element_size, "]}");
    offset += numel * element_size;
  }
  header.push_back('}');
  // Pad with spaces so the data starts 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += header;
  return out;
}

SafetensorsWriter::SafetensorsWriter(AtomicFile file,
                                     std::vector<TensorSpec> specs,
                                     int64_t data_size, Sha256 hash,
                                     int64_t header_size)
    : file_(std::move(file)),
      specs_(std::move(specs)),
      data_size_(data_size),
      hash_(std::move(hash)),
      header_size_(header_size) {}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, std::vector<TensorSpec> specs,
    const std::map<std::string, std::string>& metadata) {
  auto header = SerializeSafetensorsHeader(specs, metadata);
  if (!header.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", header.status().message()));
  }
  int64_t data_size = 0;
  for (const TensorSpec& t : specs) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;  // validated above
    data_size += numel * DTypeSize(t.dtype);
  }
  ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  ASSIGN_OR_RETURN(Sha256 hash, Sha256::Create());
  RETURN_IF_ERROR(WriteFully(file.fd(), *header, path));
  hash.Update(*header);
  return std::unique_ptr<SafetensorsWriter>(
      new SafetensorsWriter(std::move(file), std::move(specs), data_size,
                            std::move(hash),
                            static_cast<int64_t>(header->size())));
}

absl::Status SafetensorsWriter::Append(absl::string_view bytes) {
  RETURN_IF_ERROR(status_);
  if (static_cast<int64_t>(bytes.size()) > data_size_ - written_) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        path(), ": ", written_ + static_cast<int64_t>(bytes.size()),
        " data bytes appended but the header declares ", data_size_));
    return status_;
  }
  status_ = WriteFully(file_.fd(), bytes, path());
  if (!status_.ok()) return status_;
  hash_.Update(bytes);
  written_ += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> SafetensorsWriter::Finish() {
  RETURN_IF_ERROR(status_);
  if (written_ != data_size_) {
    int64_t offset = 0;
    std::string short_tensor;
    for (const TensorSpec& t : specs_) {
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      offset += numel * DTypeSize(t.dtype);
      if (offset > written_) {
        short_tensor = t.name;
        break;
      }
    }
    status_ = absl::FailedPreconditionError(absl::StrCat(
        path(), ": only ", written_, " of ", data_size_,
        " data bytes were appended (tensor '", short_tensor, "' is short)"));
    return status_;
  }
  status_ = file_.Commit();
  if (!status_.ok()) return status_;
  status_ = absl::FailedPreconditionError(
      absl::StrCat(path(), ": already finished"));
  return FileDigest{header_size_ + data_size_, hash_.FinishHex()};
}

}  // namespace pshard::checkpoint
