#include "checkpoint/manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/file.h"
#include "checkpoint/sha256.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pshard::checkpoint {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

absl::Status FieldError(absl::string_view source, absl::string_view field,
                        absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": manifest field '", field, "' ", what));
}

absl::StatusOr<const Value*> Field(const Struct& object, absl::string_view key,
                                   Value::KindCase kind,
                                   absl::string_view source,
                                   absl::string_view path) {
  auto it = object.fields().find(std::string(key));
  if (it == object.fields().end()) return FieldError(source, path, "is missing");
  if (it->second.kind_case() != kind) {
    return FieldError(source, path, "has the wrong type");
  }
  return &it->second;
}

absl::StatusOr<int64_t> IntegerField(const Struct& object, absl::string_view key,
                                     absl::string_view source,
                                     absl::string_view path) {
  ASSIGN_OR_RETURN(const Value* value,
                   Field(object, key, Value::kNumberValue, source, path));
  const double d = value->number_value();
  if (!(d >= 0) || d > kMaxExactInteger || std::floor(d) != d) {
    return FieldError(source, path,
                      absl::StrCat("must be a non-negative integer, got ", d));
  }
  return static_cast<int64_t>(d);
}

absl::StatusOr<std::string> StringField(const Struct& object,
                                        absl::string_view key,
                                        absl::string_view source,
                                        absl::string_view path) {
  ASSIGN_OR_RETURN(const Value* value,
                   Field(object, key, Value::kStringValue, source, path));
  return value->string_value();
}

}  // namespace

std::string StepDirectory(absl::string_view root, int64_t step) {
  return absl::StrCat(root, "/step-", step);
}

std::string ShardFileName(int rank, int world_size) {
  return absl::StrCat("shard-", rank, "-of-", world_size, ".safetensors");
}

int64_t ParseStepDirectoryName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "step-") || name.empty()) return -1;
  for (char c : name) {
    if (!absl::ascii_isdigit(c)) return -1;
  }
  int64_t step = -1;
  if (!absl::SimpleAtoi(name, &step)) return -1;
  // One spelling per step: "step-007" is not step 7's directory.
  if (absl::StrCat(step) != name) return -1;
  return step;
}

absl::Status ValidateManifest(const Manifest& manifest) {
  if (manifest.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest step ", manifest.step, " is negative"));
  }
  if (manifest.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest world_size ", manifest.world_size, " must be at least 1"));
  }
  if (static_cast<int>(manifest.files.size()) != manifest.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest lists ", manifest.files.size(),
                     " files for world_size ", manifest.world_size));
  }
  for (int rank = 0; rank < manifest.world_size; ++rank) {
    const ShardFileInfo& file = manifest.files[rank];
    const std::string field = absl::StrCat("files[", rank, "]");
    if (file.rank != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "manifest ", field, " has rank ", file.rank, ", expected ", rank));
    }
    if (file.name != ShardFileName(rank, manifest.world_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest ", field, " is named '", file.name,
                       "', expected '", ShardFileName(rank, manifest.world_size),
                       "'"));
    }
    if (file.size_bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest ", field, " has a negative size"));
    }
    if (!IsSha256Hex(file.sha256)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "manifest ", field, " sha256 is not 64 lowercase hex digits"));
    }
  }
  return absl::OkStatus();
}

std::string ManifestToJson(const Manifest& manifest) {
  Struct root;
  auto& fields = *root.mutable_fields();
  fields["format"].set_string_value(std::string(kCheckpointFormat));
  fields["step"].set_number_value(static_cast<double>(manifest.step));
  fields["spec_fingerprint"].set_string_value(manifest.spec_fingerprint);
  fields["world_size"].set_number_value(manifest.world_size);
  auto* files = fields["files"].mutable_list_value();
  for (const ShardFileInfo& file : manifest.files) {
    auto& f = *files->add_values()->mutable_struct_value()->mutable_fields();
    f["name"].set_string_value(file.name);
    f["rank"].set_number_value(file.rank);
    f["size_bytes"].set_number_value(static_cast<double>(file.size_bytes));
    f["sha256"].set_string_value(file.sha256);
  }
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  std::string json;
  // A Struct of strings and numbers always converts.
  (void)google::protobuf::util::MessageToJsonString(root, &json, options);
  return json;
}

absl::StatusOr<Manifest> ManifestFromJson(absl::string_view json,
                                          absl::string_view source) {
  Struct root;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &root);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": manifest is not a JSON object: ", parsed.ToString()));
  }
  ASSIGN_OR_RETURN(std::string format,
                   StringField(root, "format", source, "format"));
  if (format != kCheckpointFormat) {
    return FieldError(source, "format",
                      absl::StrCat("is '", format, "', expected '",
                                   kCheckpointFormat, "'"));
  }
  Manifest manifest;
  ASSIGN_OR_RETURN(manifest.step, IntegerField(root, "step", source, "step"));
  ASSIGN_OR_RETURN(manifest.spec_fingerprint,
                   StringField(root, "spec_fingerprint", source,
                               "spec_fingerprint"));
  ASSIGN_OR_RETURN(int64_t world_size,
                   IntegerField(root, "world_size", source, "world_size"));
  if (world_size > (1 << 20)) {
    return FieldError(source, "world_size", "is implausibly large");
  }
  manifest.world_size = static_cast<int>(world_size);
  ASSIGN_OR_RETURN(const Value* files,
                   Field(root, "files", Value::kListValue, source, "files"));
  for (int i = 0; i < files->list_value().values_size(); ++i) {
    const std::string path = absl::StrCat("files[", i, "]");
    const Value& entry = files->list_value().values(i);
    if (entry.kind_case() != Value::kStructValue) {
      return FieldError(source, path, "is not an object");
    }
    const Struct& f = entry.struct_value();
    ShardFileInfo file;
    ASSIGN_OR_RETURN(file.name, StringField(f, "name", source, path + ".name"));
    ASSIGN_OR_RETURN(int64_t rank, IntegerField(f, "rank", source, path + ".rank"));
    file.rank = static_cast<int>(std::min<int64_t>(rank, 1 << 20));
    ASSIGN_OR_RETURN(file.size_bytes,
                     IntegerField(f, "size_bytes", source, path + ".size_bytes"));
    ASSIGN_OR_RETURN(file.sha256, StringField(f, "sha256", source, path + ".sha256"));
    manifest.files.push_back(std::move(file));
  }
  if (absl::Status valid = ValidateManifest(manifest); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", valid.message()));
  }
  return manifest;
}

absl::Status WriteManifest(absl::string_view root, const Manifest& manifest) {
  RETURN_IF_ERROR(ValidateManifest(manifest));
  const std::string dir = StepDirectory(root, manifest.step);
  for (const ShardFileInfo& file : manifest.files) {
    const std::string path = absl::StrCat(dir, "/", file.name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot write the manifest of step ", manifest.step, ": shard '",
          path, "' is missing"));
    }
    if (st.st_size != file.size_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot write the manifest of step ", manifest.step, ": shard '",
          path, "' has ", st.st_size, " bytes, the manifest says ",
          file.size_bytes));
    }
  }
  return WriteFileAtomically(absl::StrCat(dir, "/", kManifestFileName),
                             ManifestToJson(manifest));
}

absl::StatusOr<Manifest> ReadManifest(const std::string& step_dir) {
  const std::string path = absl::StrCat(step_dir, "/", kManifestFileName);
  auto json = ReadSmallFile(path, kMaxManifestBytes);
  if (!json.ok()) {
    if (absl::IsNotFound(json.status())) {
      return absl::NotFoundError(absl::StrCat(
          step_dir, " is incomplete: it has no ", kManifestFileName));
    }
    return json.status();
  }
  ASSIGN_OR_RETURN(Manifest manifest, ManifestFromJson(*json, path));
  const size_t slash = step_dir.find_last_of('/');
  const int64_t dir_step = ParseStepDirectoryName(
      slash == std::string::npos ? step_dir : step_dir.substr(slash + 1));
  if (dir_step >= 0 && dir_step != manifest.step) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": manifest step ", manifest.step, " in directory of step ",
        dir_step));
  }
  return manifest;
}

absl::StatusOr<Manifest> VerifyCheckpoint(const std::string& step_dir) {
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(step_dir));
  for (const ShardFileInfo& file : manifest.files) {
    const std::string path = absl::StrCat(step_dir, "/", file.name);
    ASSIGN_OR_RETURN(FileDigest digest, DigestFile(path));
    if (digest.size_bytes != file.size_bytes) {
      return absl::DataLossError(absl::StrCat(
          path, " has ", digest.size_bytes, " bytes but the manifest says ",
          file.size_bytes, " (truncated or overwritten)"));
    }
    if (digest.sha256 != file.sha256) {
      return absl::DataLossError(absl::StrCat(
          path, " is corrupted: its SHA-256 is ", digest.sha256,
          " but the manifest says ", file.sha256));
    }
  }
  return manifest;
}

}  // namespace pshard::checkpoint
