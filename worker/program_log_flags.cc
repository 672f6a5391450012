#include "worker/program_log_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, log_dir, "",
          "where program jobs' output goes, one file per job and rank "
          "(<log_dir>/<job>/rank-<R>.log); default "
          "$TMPDIR/pshard-worker-<name>/logs (TMPDIR default /tmp)");
ABSL_FLAG(int64_t, log_max_bytes, int64_t{64} << 20,
          "cap of each program log file; at the cap it is rotated to "
          "<file>.1 (so at most twice this per rank); >= 1024");

namespace pshard::worker {

std::string ProgramLogDirFlag() { return absl::GetFlag(FLAGS_log_dir); }

int64_t ProgramLogMaxBytesFlag() { return absl::GetFlag(FLAGS_log_max_bytes); }

}  // namespace pshard::worker
