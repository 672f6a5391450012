#include "worker/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
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

namespace pshard::worker {
namespace {

static_assert(sizeof(float) == 4, "fp32 expected");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader assumes a little-endian host"
#endif

// Largest integer a JSON number (a double) holds exactly.
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

// Closes a file descriptor on scope exit.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and reports the error close() returns.
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

absl::Status ErrnoError(absl::string_view what, absl::string_view path,
                        int err) {
  const std::string message =
      absl::StrCat(what, " '", path, "': ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

// One tensor's header entry, validated against the data section's size.
struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

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

absl::StatusOr<Entry> ParseEntry(const std::string& name,
                                 const google::protobuf::Value& value,
                                 int64_t data_size, absl::string_view source) {
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
  if (dtype->second.string_value() != "F32") {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has dtype ", dtype->second.string_value(),
                     "; only F32 is supported"));
  }

  Entry entry;
  entry.name = name;
  if (shape->second.kind_case() != google::protobuf::Value::kListValue ||
      shape->second.list_value().values_size() > kMaxSafetensorsRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": shape must be a list of at most ", kMaxSafetensorsRank,
        " integers"));
  }
  // numel is bounded by the data section, so the product cannot overflow:
  // stop as soon as it exceeds what the file could hold.
  const int64_t max_numel = data_size / 4;
  entry.numel = 1;
  for (const auto& dim_value : shape->second.list_value().values()) {
    ASSIGN_OR_RETURN(int64_t dim,
                     ExactInteger(dim_value, absl::StrCat(where, ": shape")));
    entry.shape.push_back(dim);
    if (entry.numel > 0 && dim > max_numel / entry.numel + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": shape [", absl::StrJoin(entry.shape, ", "),
          "...] is larger than the file's data section"));
    }
    entry.numel *= dim;
  }
  if (entry.numel > max_numel) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": shape [", absl::StrJoin(entry.shape, ", "),
                     "] is larger than the file's data section"));
  }

  if (offsets->second.kind_case() != google::protobuf::Value::kListValue ||
      offsets->second.list_value().values_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": data_offsets must be [begin, end]"));
  }
  ASSIGN_OR_RETURN(entry.begin,
                   ExactInteger(offsets->second.list_value().values(0),
                                absl::StrCat(where, ": data_offsets[0]")));
  ASSIGN_OR_RETURN(entry.end,
                   ExactInteger(offsets->second.list_value().values(1),
                                absl::StrCat(where, ": data_offsets[1]")));
  if (entry.begin > entry.end || entry.end > data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": data_offsets [", entry.begin, ", ", entry.end,
        "] outside the data section of ", data_size, " bytes"));
  }
  if (entry.end - entry.begin != entry.numel * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": data_offsets [", entry.begin, ", ", entry.end, "] hold ",
        entry.end - entry.begin, " bytes but shape [",
        absl::StrJoin(entry.shape, ", "), "] of F32 needs ", entry.numel * 4));
  }
  return entry;
}

// Validates the JSON header against a data section of `data_size` bytes and
// returns the entries ordered by data offset.
absl::StatusOr<std::vector<Entry>> ParseHeader(absl::string_view json,
                                               int64_t data_size,
                                               absl::string_view source) {
  google::protobuf::Struct header;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &header);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": header is not a JSON object: ", parsed.ToString()));
  }
  std::vector<Entry> entries;
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
      }
      continue;
    }
    ASSIGN_OR_RETURN(Entry entry, ParseEntry(name, value, data_size, source));
    entries.push_back(std::move(entry));
  }
  // Order by offset; the name breaks ties between empty tensors so the order
  // never depends on the JSON map's iteration order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].begin < entries[i - 1].end) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": tensors '", entries[i - 1].name, "' [",
          entries[i - 1].begin, ", ", entries[i - 1].end, ") and '",
          entries[i].name, "' [", entries[i].begin, ", ", entries[i].end,
          ") overlap"));
    }
  }
  return entries;
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

// Reads exactly `size` bytes at `offset`.
absl::Status PreadFully(int fd, void* buffer, int64_t size, int64_t offset,
                        absl::string_view path) {
  char* out = static_cast<char*>(buffer);
  while (size > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<size_t>(size), offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path, errno);
    }
    if (got == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": file shrank while being read"));
    }
    out += got;
    size -= got;
    offset += got;
  }
  return absl::OkStatus();
}

absl::Status WriteFully(int fd, absl::string_view bytes,
                        absl::string_view path) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t put = ::write(fd, p, left);
    if (put < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path, errno);
    }
    p += put;
    left -= static_cast<size_t>(put);
  }
  return absl::OkStatus();
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

std::vector<SafetensorsTensorView> Views(
    absl::Span<const SafetensorsTensor> tensors) {
  std::vector<SafetensorsTensorView> views;
  views.reserve(tensors.size());
  for (const SafetensorsTensor& t : tensors) {
    views.push_back({t.name, t.shape, absl::MakeConstSpan(t.data)});
  }
  return views;
}

}  // namespace

absl::StatusOr<std::vector<SafetensorsTensor>> ParseSafetensors(
    absl::string_view bytes, absl::string_view source) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": truncated: ", size, " bytes, shorter than the length prefix"));
  }
  ASSIGN_OR_RETURN(
      int64_t header_len,
      HeaderLength(reinterpret_cast<const unsigned char*>(bytes.data()), size,
                   source));
  const int64_t data_start = 8 + header_len;
  ASSIGN_OR_RETURN(std::vector<Entry> entries,
                   ParseHeader(bytes.substr(8, header_len), size - data_start,
                               source));
  std::vector<SafetensorsTensor> tensors;
  tensors.reserve(entries.size());
  for (Entry& e : entries) {
    SafetensorsTensor t;
    t.name = std::move(e.name);
    t.shape = std::move(e.shape);
    t.data.resize(e.numel);
    if (e.numel > 0) {
      std::memcpy(t.data.data(), bytes.data() + data_start + e.begin,
                  e.numel * 4);
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensors(
    const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("cannot open", path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  const int64_t size = st.st_size;
  if (size < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": truncated: ", size, " bytes, shorter than the length prefix"));
  }
  unsigned char prefix[8];
  RETURN_IF_ERROR(PreadFully(fd.get(), prefix, 8, 0, path));
  ASSIGN_OR_RETURN(int64_t header_len, HeaderLength(prefix, size, path));
  std::string header(static_cast<size_t>(header_len), '\0');
  RETURN_IF_ERROR(PreadFully(fd.get(), header.data(), header_len, 8, path));
  const int64_t data_start = 8 + header_len;
  ASSIGN_OR_RETURN(std::vector<Entry> entries,
                   ParseHeader(header, size - data_start, path));
  std::vector<SafetensorsTensor> tensors;
  tensors.reserve(entries.size());
  for (Entry& e : entries) {
    SafetensorsTensor t;
    t.name = std::move(e.name);
    t.shape = std::move(e.shape);
    t.data.resize(e.numel);
    RETURN_IF_ERROR(PreadFully(fd.get(), t.data.data(), e.numel * 4,
                               data_start + e.begin, path));
    tensors.push_back(std::move(t));
  }
  return tensors;
}

absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const SafetensorsTensorView> tensors) {
  absl::flat_hash_set<absl::string_view> names;
  std::string header = "{";
  int64_t offset = 0;
  for (const SafetensorsTensorView& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid tensor name '", t.name, "'"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    int64_t numel = 1;
    for (int64_t dim : t.shape) {
      if (dim < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has a negative dimension"));
      }
      numel *= dim;
    }
    if (numel != static_cast<int64_t>(t.data.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "': shape [", absl::StrJoin(t.shape, ", "),
          "] has ", numel, " elements but ", t.data.size(), " were given"));
    }
    if (header.size() > 1) header.push_back(',');
    AppendJsonString(header, t.name);
    absl::StrAppend(&header, ":{\"dtype\":\"F32\",\"shape\":[",
                    absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset,
                    ",", offset + numel * 4, "]}");
    offset += numel * 4;
  }
  header.push_back('}');
  // Pad with spaces so the data starts 8-byte aligned, as the reference
  // implementation does.
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + header.size() + static_cast<size_t>(offset));
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += header;
  for (const SafetensorsTensorView& t : tensors) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  }
  return out;
}

absl::Status WriteSafetensorsAtomic(
    const std::string& path, absl::Span<const SafetensorsTensorView> tensors) {
  ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(tensors));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos
                              ? "."
                              : (slash == 0 ? "/" : path.substr(0, slash));
  std::string tmp = absl::StrCat(path, ".tmp.XXXXXX");
  FileDescriptor fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("cannot create a temporary file for", path, errno);
  absl::Status status = WriteFully(fd.get(), bytes, tmp);
  if (status.ok() && ::fsync(fd.get()) != 0) {
    status = ErrnoError("cannot fsync", tmp, errno);
  }
  if (status.ok() && ::fchmod(fd.get(), 0644) != 0) {
    status = ErrnoError("cannot chmod", tmp, errno);
  }
  if (fd.Close() != 0 && status.ok()) {
    status = ErrnoError("cannot close", tmp, errno);
  }
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoError(absl::StrCat("cannot rename ", tmp, " to"), path, errno);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  // Make the rename itself durable.
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
  return absl::OkStatus();
}

absl::Status WriteSafetensorsAtomic(
    const std::string& path, absl::Span<const SafetensorsTensor> tensors) {
  const std::vector<SafetensorsTensorView> views = Views(tensors);
  return WriteSafetensorsAtomic(path, absl::MakeConstSpan(views));
}

}  // namespace pshard::worker
