// ProgramLogStreamer: the reading side of ProgramLog (program_log.h), behind
// WorkerStatus.StreamLogs: it sends one rank's log file of a program job in
// bounded chunks, from an offset, and with `follow` keeps sending what the
// program writes until the program has exited and the file is drained.
//
//   validate (job id syntax, rank >= 0, offset >= 0)
//   -> open ProgramLogPath(log_dir, job, rank)  (built from validated parts
//      only: a valid job id is its own directory name, no traversal)
//   -> loop: was the program running (sampled *before* the read)?
//            read to EOF in chunks of at most kMaxLogChunkBytes
//            not following, or the program was already gone: done
//            the file was rotated (a new inode at the path): read the old
//            one to its end, continue at offset 0 of the new one
//            wait poll_interval on the clock (never a busy spin); end if
//            the client went away
//
// Sampling "running" before the read makes the end exact: ProgramJob
// flushes every write and closes the log before the agent marks the rank
// ended, so once a sample says "not running" the read that follows sees
// everything the program wrote.
//
// Errors (absl::Status, turned into grpc::Status once by the service):
//   InvalidArgument: job id not [A-Za-z0-9._-]{1,128} (or "." / ".."),
//     rank < 0, offset < 0.
//   NotFound: no log of that job and rank on this worker, and it does not
//     run it now (a running rank whose program has not opened its log yet
//     is waited for when following, and is an empty log otherwise).
//   OutOfRange: offset past the end of the file.
//   Cancelled: the client went away while following.
//   Internal: the file cannot be read.
#ifndef PSHARD_WORKER_RUNTIME_PROGRAM_LOG_STREAM_H_
#define PSHARD_WORKER_RUNTIME_PROGRAM_LOG_STREAM_H_

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/worker_status.pb.h"

namespace pshard::worker {

inline constexpr size_t kMaxLogChunkBytes = size_t{64} << 10;
inline constexpr size_t kMaxLogJobIdLength = 128;

// InvalidArgument naming the field when `request` cannot name a log.
absl::Status ValidateStreamLogsRequest(const v1::StreamLogsRequest& request);

struct ProgramLogStreamerOptions {
  // The worker's --log_dir (ProgramJobOptions::log_dir).
  std::string log_dir;
  // How this worker is named in NotFound messages ("worker w-3").
  std::string worker_name;
  // How often a follower looks at the file again at its end.
  absl::Duration poll_interval = absl::Milliseconds(100);
  // Chunk bound; at most kMaxLogChunkBytes.
  size_t max_chunk_bytes = kMaxLogChunkBytes;
  // Follow's waits. Must outlive the streamer.
  const Clock* clock = &Clock::Real();
};

class ProgramLogStreamer {
 public:
  // Whether this worker runs rank `rank` of `job_id` now (the agent's view;
  // thread-safe).
  using RunningCheck = std::function<bool(absl::string_view job_id, int rank)>;
  // Sends one chunk; false when the client has gone.
  using ChunkWriter = std::function<bool(const v1::LogChunk& chunk)>;

  ProgramLogStreamer(ProgramLogStreamerOptions options, RunningCheck running);

  // Streams the log `request` names through `write`, as described above.
  // `cancelled` is asked at every wait. Thread-safe: one call per stream.
  absl::Status Stream(const v1::StreamLogsRequest& request,
                      const std::function<bool()>& cancelled,
                      const ChunkWriter& write) const;

 private:
  const ProgramLogStreamerOptions options_;
  const RunningCheck running_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_PROGRAM_LOG_STREAM_H_
