// ProgramLog: the size-capped log file of one rank of a program job on its
// worker, <log_dir>/<job id>/rank-<R>.log (ProgramLogPath). When the file
// would pass max_bytes it is rotated: the full file becomes rank-<R>.log.1
// (replacing an older one) and a new one starts with a line saying so, so a
// rank's output never takes more than twice the cap on disk and the newest
// output is always in rank-<R>.log. Each attempt (epoch) of the job appends
// a header line to the same file.
//
// `pshardctl logs` reads these files through the worker's status service
// (WorkerStatus.StreamLogs: ProgramLogStreamer, program_log_stream.h), which
// follows a rotation; ProgramLogPath is the one place that names the files.
#ifndef PSHARD_WORKER_RUNTIME_PROGRAM_LOG_H_
#define PSHARD_WORKER_RUNTIME_PROGRAM_LOG_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard::worker {

// <log_dir>/<job id>/rank-<rank>.log; characters of the job id other than
// [A-Za-z0-9._-] become '_' (ids come over the network).
std::string ProgramLogPath(absl::string_view log_dir, absl::string_view job_id,
                           int rank);

class ProgramLog {
 public:
  // Opens (appending) `path`, creating its directory. max_bytes >= 1024.
  // Internal when the directory or file cannot be made.
  static absl::StatusOr<std::unique_ptr<ProgramLog>> Open(std::string path,
                                                          int64_t max_bytes);
  ~ProgramLog();
  ProgramLog(const ProgramLog&) = delete;
  ProgramLog& operator=(const ProgramLog&) = delete;

  const std::string& path() const { return path_; }

  // Appends `data`, rotating as described above. Write errors (a full disk)
  // drop output rather than fail the program.
  void Append(absl::string_view data);

 private:
  ProgramLog(std::string path, int64_t max_bytes, std::FILE* file,
             int64_t size);
  void Rotate();

  const std::string path_;
  const int64_t max_bytes_;
  std::FILE* file_;
  int64_t size_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_PROGRAM_LOG_H_
