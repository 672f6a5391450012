// `pshardctl export CHECKPOINT OUT.safetensors`: a checkpoint's full
// parameters (no optimizer state) as one safetensors file, after verifying
// the manifest; streamed shard by shard (checkpoint/export.h). Needs no
// coordinator. Kept apart from commands.cc: it reads files, not RPCs.
#ifndef PSHARD_CLI_EXPORT_COMMAND_H_
#define PSHARD_CLI_EXPORT_COMMAND_H_

#include <ostream>

namespace pshard::cli {

// Runs `pshardctl export ...` from main's raw argv (argv[1] == "export"):
// its own --help and --output=table|json; relative paths are the user's
// (BUILD_WORKING_DIRECTORY under `bazel run`). Returns the exit code: 0, 1
// (the checkpoint is refused or the write failed; the message names the
// file), 2 (usage).
int ExportMain(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace pshard::cli

#endif  // PSHARD_CLI_EXPORT_COMMAND_H_
