#include "worker/runtime/program_log.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pshard::worker {

std::string ProgramLogPath(absl::string_view log_dir, absl::string_view job_id,
                           int rank) {
  std::string dir(job_id.empty() ? "_" : job_id);
  for (char& c : dir) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      c = '_';
    }
  }
  if (dir == "." || dir == "..") dir = "_";
  return absl::StrCat(log_dir, "/", dir, "/rank-", rank, ".log");
}

absl::StatusOr<std::unique_ptr<ProgramLog>> ProgramLog::Open(
    std::string path, int64_t max_bytes) {
  if (max_bytes < 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("log cap must be >= 1024 bytes, got ", max_bytes));
  }
  std::error_code error;
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path(), error);
  if (error) {
    return absl::InternalError(absl::StrCat(
        "cannot create the directory of log ", path, ": ", error.message()));
  }
  std::FILE* file = std::fopen(path.c_str(), "ae");
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot open log ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  const int64_t size = fstat(fileno(file), &st) == 0 ? st.st_size : 0;
  return std::unique_ptr<ProgramLog>(
      new ProgramLog(std::move(path), max_bytes, file, size));
}

ProgramLog::ProgramLog(std::string path, int64_t max_bytes, std::FILE* file,
                       int64_t size)
    : path_(std::move(path)), max_bytes_(max_bytes), file_(file), size_(size) {}

ProgramLog::~ProgramLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void ProgramLog::Rotate() {
  if (file_ != nullptr) std::fclose(file_);
  const std::string previous = path_ + ".1";
  std::rename(path_.c_str(), previous.c_str());
  file_ = std::fopen(path_.c_str(), "we");
  size_ = 0;
  if (file_ == nullptr) return;
  std::string marker = absl::StrCat("[pshard: log reached ", max_bytes_,
                                    " bytes; earlier output in ", previous,
                                    "]\n");
  // Room for output after the marker, however long the path.
  marker.resize(std::min<size_t>(marker.size(), max_bytes_ / 2));
  size_ += std::fwrite(marker.data(), 1, marker.size(), file_);
}

void ProgramLog::Append(absl::string_view data) {
  while (!data.empty()) {
    if (size_ >= max_bytes_) Rotate();
    if (file_ == nullptr) return;
    const int64_t room = max_bytes_ - size_;
    const size_t n =
        std::min<size_t>(data.size(), static_cast<size_t>(std::max<int64_t>(room, 1)));
    size_ += std::fwrite(data.data(), 1, n, file_);
    data.remove_prefix(n);
  }
  if (file_ != nullptr) std::fflush(file_);
}

}  // namespace pshard::worker
