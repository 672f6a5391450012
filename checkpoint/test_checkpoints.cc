#include "checkpoint/test_checkpoints.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::checkpoint::testing {

ParameterTensors OwnedParameter::View() const {
  return ParameterTensors{name,
                          FloatTensor(value, shape),
                          {{"exp_avg", FloatTensor(exp_avg, shape)},
                           {"exp_avg_sq", FloatTensor(exp_avg_sq, shape)}}};
}

std::vector<OwnedParameter> MakeParameters(int count, int64_t step) {
  std::vector<OwnedParameter> params;
  for (int i = 0; i < count; ++i) {
    OwnedParameter p;
    p.name = absl::StrCat("p", i, ".weight");
    const int64_t numel = 1 + 7 * i;
    // Every third is 2-D (rows of 3, the remainder dropped).
    p.shape = (i % 3 == 2) ? std::vector<int64_t>{numel / 3, 3}
                           : std::vector<int64_t>{numel};
    int64_t shape_numel = 1;
    for (int64_t d : p.shape) shape_numel *= d;
    for (int64_t e = 0; e < shape_numel; ++e) {
      p.value.push_back(0.5f * i + 0.001f * e + 0.25f * step);
      p.exp_avg.push_back(-0.01f * e + step);
      p.exp_avg_sq.push_back(0.0001f * e * e + i);
    }
    params.push_back(std::move(p));
  }
  return params;
}

absl::StatusOr<Manifest> WriteCheckpoint(const std::string& root, int64_t step,
                                         int world_size,
                                         const std::vector<OwnedParameter>& params,
                                         std::vector<int> owner_of,
                                         const std::string& fingerprint) {
  if (owner_of.empty()) {
    for (size_t i = 0; i < params.size(); ++i) {
      owner_of.push_back(static_cast<int>(i) % world_size);
    }
  }
  Manifest manifest{step, fingerprint, world_size, {}};
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<ParameterTensors> mine;
    for (size_t i = 0; i < params.size(); ++i) {
      if (owner_of[i] == rank) mine.push_back(params[i].View());
    }
    ASSIGN_OR_RETURN(CheckpointWriter writer,
                     CheckpointWriter::Create(root, rank, world_size, fingerprint));
    ASSIGN_OR_RETURN(ShardFileInfo file, writer.WriteShard(step, mine));
    manifest.files.push_back(std::move(file));
  }
  RETURN_IF_ERROR(WriteManifest(root, manifest));
  return manifest;
}

void FlipByte(const std::string& path, int64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  struct stat st;
  ::fstat(fd, &st);
  if (offset < 0) offset += st.st_size;
  char c = 0;
  ::pread(fd, &c, 1, offset);
  c = static_cast<char>(c ^ 0x5a);
  ::pwrite(fd, &c, 1, offset);
  ::close(fd);
}

void Truncate(const std::string& path, int64_t size) {
  ::truncate(path.c_str(), size);
}

}  // namespace pshard::checkpoint::testing
