// `pshardctl export CHECKPOINT OUT.safetensors`: a checkpoint's full
// parameters (no optimizer state) as one safetensors file, after verifying
// the manifest; streamed shard by shard (checkpoint/export.h). Needs no
// coordinator. Kept apart from commands.cc: it reads files, not RPCs.
#ifndef PSHARD_CLI_EXPORT_COMMAND_H_
#define PSHARD_CLI_EXPORT_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "cli/commands.h"

namespace pshard::cli {

// Exports `checkpoint` (a step directory, or a job's checkpoint directory:
// then its latest complete checkpoint) to `output` and prints what was
// written in `format`. Paths are used as given (main makes them the user's).
// FailedPrecondition: the checkpoint is refused (the message names the file
// and why) or the write failed; never InvalidArgument, so that a refused
// checkpoint exits 1, not 2 (bad command line).
absl::Status ExportCheckpoint(const std::string& checkpoint,
                              const std::string& output, OutputFormat format,
                              std::ostream& out);

}  // namespace pshard::cli

#endif  // PSHARD_CLI_EXPORT_COMMAND_H_
