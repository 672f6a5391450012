// The fp32 view of checkpoint/safetensors.h: the one implementation of the
// format (header validation, atomic streamed writes) lives there; this file
// only narrows it to F32 and to whole-file reads and writes.
#include "worker/io/safetensors.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "checkpoint/safetensors.h"
#include "common/status_macros.h"

namespace pshard::worker {
namespace {

static_assert(sizeof(float) == 4, "fp32 expected");

using checkpoint::DType;
using checkpoint::TensorInfo;

absl::Status CheckF32(const TensorInfo& info, absl::string_view source) {
  if (info.dtype == DType::kF32) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": tensor '", info.name, "' has dtype ",
                   checkpoint::DTypeName(info.dtype), "; only F32 is supported"));
}

SafetensorsTensor EmptyTensor(const TensorInfo& info) {
  SafetensorsTensor t;
  t.name = info.name;
  t.shape = info.shape;
  t.data.resize(static_cast<size_t>(info.numel));
  return t;
}

absl::Span<char> BytesOf(std::vector<float>& data) {
  return absl::MakeSpan(reinterpret_cast<char*>(data.data()), data.size() * 4);
}

// The header specs of `tensors`, after checking each one's element count.
absl::StatusOr<std::vector<checkpoint::TensorSpec>> Specs(
    absl::Span<const SafetensorsTensorView> tensors) {
  std::vector<checkpoint::TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const SafetensorsTensorView& t : tensors) {
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
    specs.push_back({t.name, DType::kF32, t.shape});
  }
  return specs;
}

absl::string_view DataOf(const SafetensorsTensorView& t) {
  return absl::string_view(reinterpret_cast<const char*>(t.data.data()),
                           t.data.size() * 4);
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
  ASSIGN_OR_RETURN(checkpoint::SafetensorsHeader header,
                   checkpoint::ParseSafetensorsImage(bytes, source));
  std::vector<SafetensorsTensor> tensors;
  tensors.reserve(header.tensors.size());
  for (const TensorInfo& info : header.tensors) {
    RETURN_IF_ERROR(CheckF32(info, source));
    SafetensorsTensor t = EmptyTensor(info);
    if (info.numel > 0) {
      std::memcpy(t.data.data(), bytes.data() + header.data_start + info.begin,
                  static_cast<size_t>(info.byte_size()));
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensors(
    const std::string& path) {
  ASSIGN_OR_RETURN(auto reader, checkpoint::SafetensorsReader::Open(path));
  std::vector<SafetensorsTensor> tensors;
  tensors.reserve(reader->tensors().size());
  for (const TensorInfo& info : reader->tensors()) {
    RETURN_IF_ERROR(CheckF32(info, path));
  }
  for (const TensorInfo& info : reader->tensors()) {
    SafetensorsTensor t = EmptyTensor(info);
    RETURN_IF_ERROR(reader->ReadInto(info, BytesOf(t.data)));
    tensors.push_back(std::move(t));
  }
  return tensors;
}

absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const SafetensorsTensorView> tensors) {
  ASSIGN_OR_RETURN(std::vector<checkpoint::TensorSpec> specs, Specs(tensors));
  ASSIGN_OR_RETURN(std::string out,
                   checkpoint::SerializeSafetensorsHeader(specs, {}));
  for (const SafetensorsTensorView& t : tensors) absl::StrAppend(&out, DataOf(t));
  return out;
}

absl::Status WriteSafetensorsAtomic(
    const std::string& path, absl::Span<const SafetensorsTensorView> tensors) {
  ASSIGN_OR_RETURN(std::vector<checkpoint::TensorSpec> specs, Specs(tensors));
  ASSIGN_OR_RETURN(auto writer,
                   checkpoint::SafetensorsWriter::Create(path, std::move(specs), {}));
  for (const SafetensorsTensorView& t : tensors) {
    RETURN_IF_ERROR(writer->Append(DataOf(t)));
  }
  return writer->Finish().status();
}

absl::Status WriteSafetensorsAtomic(
    const std::string& path, absl::Span<const SafetensorsTensor> tensors) {
  const std::vector<SafetensorsTensorView> views = Views(tensors);
  return WriteSafetensorsAtomic(path, absl::MakeConstSpan(views));
}

}  // namespace pshard::worker
