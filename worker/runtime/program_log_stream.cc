#include "worker/runtime/program_log_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/runtime/program_log.h"

namespace pshard::worker {
namespace {

// An open file descriptor, closed when it goes.
class ReadOnlyFile {
 public:
  ReadOnlyFile() = default;
  explicit ReadOnlyFile(int fd) : fd_(fd) {}
  ReadOnlyFile(ReadOnlyFile&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)) {}
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept {
    if (this != &other) {
      Close();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~ReadOnlyFile() { Close(); }

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool ValidJobIdChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '_' || c == '-';
}

// Whether `path` now names another file than `file` (ProgramLog rotated it).
bool Rotated(const std::string& path, const ReadOnlyFile& file) {
  struct stat at_path;
  struct stat open_file;
  if (::stat(path.c_str(), &at_path) != 0) return false;
  if (::fstat(file.fd(), &open_file) != 0) return false;
  return at_path.st_ino != open_file.st_ino ||
         at_path.st_dev != open_file.st_dev;
}

}  // namespace

absl::Status ValidateStreamLogsRequest(const v1::StreamLogsRequest& request) {
  const std::string& id = request.job_id();
  if (id.empty() || id.size() > kMaxLogJobIdLength ||
      !std::all_of(id.begin(), id.end(), ValidJobIdChar) || id == "." ||
      id == "..") {
    return absl::InvalidArgumentError(absl::StrCat(
        "job_id: \"", absl::CEscape(id.substr(0, kMaxLogJobIdLength)),
        "\" is not a job id (1 to ", kMaxLogJobIdLength,
        " of [A-Za-z0-9._-], such as job-3)"));
  }
  if (request.rank() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: must be >= 0, got ", request.rank()));
  }
  if (request.offset() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset: must be >= 0, got ", request.offset()));
  }
  return absl::OkStatus();
}

ProgramLogStreamer::ProgramLogStreamer(ProgramLogStreamerOptions options,
                                       RunningCheck running)
    : options_(std::move(options)), running_(std::move(running)) {}

absl::Status ProgramLogStreamer::Stream(const v1::StreamLogsRequest& request,
                                        const std::function<bool()>& cancelled,
                                        const ChunkWriter& write) const {
  RETURN_IF_ERROR(ValidateStreamLogsRequest(request));
  const std::string& job_id = request.job_id();
  const int rank = request.rank();
  // A valid id is its own directory name: ProgramLogPath changes nothing.
  const std::string path = ProgramLogPath(options_.log_dir, job_id, rank);
  const std::string what = absl::StrCat("log of ", job_id, " rank ", rank);
  const size_t chunk_bytes =
      std::clamp<size_t>(options_.max_chunk_bytes, 1, kMaxLogChunkBytes);
  std::vector<char> buffer(chunk_bytes);

  // Sends what the file holds from `offset` to its current end.
  auto drain = [&](const ReadOnlyFile& file, int64_t& offset) -> absl::Status {
    while (true) {
      const ssize_t n = ::pread(file.fd(), buffer.data(), buffer.size(), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::InternalError(absl::StrCat(
            "cannot read the ", what, " (", path, "): ", std::strerror(errno)));
      }
      if (n == 0) return absl::OkStatus();
      v1::LogChunk chunk;
      chunk.set_data(buffer.data(), static_cast<size_t>(n));
      chunk.set_offset(offset);
      if (!write(chunk)) {
        return absl::CancelledError(
            absl::StrCat("the reader of the ", what, " went away"));
      }
      offset += n;
    }
  };
  // Follow's pause at the end of the file; false once the client has gone.
  auto pause = [&]() {
    options_.clock->SleepFor(options_.poll_interval);
    return !cancelled();
  };
  auto gone = [&]() {
    return absl::CancelledError(
        absl::StrCat("the reader of the ", what, " went away"));
  };

  ReadOnlyFile file;
  int64_t offset = request.offset();
  bool opened_before = false;
  while (true) {
    // Sampled before the read: see the header.
    const bool running = running_(job_id, rank);
    if (!file.is_open()) {
      file = ReadOnlyFile(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!file.is_open()) {
        if (errno != ENOENT) {
          return absl::InternalError(absl::StrCat("cannot open the ", what,
                                                  " (", path,
                                                  "): ", std::strerror(errno)));
        }
        if (opened_before) return absl::OkStatus();  // removed meanwhile
        if (!running) {
          return absl::NotFoundError(absl::StrCat(
              options_.worker_name, " has no log of ", job_id, " rank ", rank,
              " (it never ran that rank, or its --log_dir changed)"));
        }
        // The rank is starting: its program has not opened the log yet.
        if (!request.follow()) return absl::OkStatus();
        if (!pause()) return gone();
        continue;
      }
      if (!opened_before) {
        struct stat st;
        if (::fstat(file.fd(), &st) != 0) {
          return absl::InternalError(
              absl::StrCat("cannot stat the ", what, ": ", std::strerror(errno)));
        }
        if (offset > st.st_size) {
          return absl::OutOfRangeError(
              absl::StrCat("offset ", offset, " is past the end of the ", what,
                           " (", st.st_size, " bytes)"));
        }
      } else {
        offset = 0;  // the rotated file's successor, from its start
      }
      opened_before = true;
    }
    RETURN_IF_ERROR(drain(file, offset));
    if (!request.follow() || !running) return absl::OkStatus();
    if (Rotated(path, file)) {
      // ProgramLog closed the old file before the rename: what it wrote
      // after the drain above is read now, then the new file from 0.
      RETURN_IF_ERROR(drain(file, offset));
      file.Close();
      continue;
    }
    if (!pause()) return gone();
  }
}

}  // namespace pshard::worker
