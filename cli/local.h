// `pshardctl local`: a whole pshard cluster on this machine for one job. It
// starts pshard-coordinator (state in the run directory) and N pshard-workers
// (on the CPU, or worker i on GPU cuda:i) as child processes on 127.0.0.1 with free ports, submits the
// job, shows the shard table and the live progress, prints where the final
// parameters are, and stops every process it started, on completion or on
// Ctrl-C. This is the README's first command.
#ifndef PSHARD_CLI_LOCAL_H_
#define PSHARD_CLI_LOCAL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::cli {

struct LocalOptions {
  // Job-spec file; empty: the built-in default
  // (examples/mlp_adam_2workers.json).
  std::string spec_path;
  // Workers to start; 0: the spec's world_size. When set, it also sets the
  // spec's world_size.
  int workers = 0;
  // The workers' devices: "cpu", or "cuda" for worker i on cuda:i (one
  // worker per GPU, as NCCL wants).
  std::string device = "cpu";
  // Run directory (state, logs, ports, default output); empty: a new
  // directory under $TMPDIR (or /tmp).
  std::string run_dir;
  // Directory holding pshard-coordinator and pshard-worker; empty: search
  // next to `self_path`, the bazel-bin layout, and the Bazel runfiles.
  std::string bin_dir;
  // This program's path (/proc/self/exe), the start of the binary search.
  std::string self_path;
  // Relative paths in the spec are taken relative to this directory (the
  // user's working directory); see ResolveUserPaths.
  std::string base_dir;
  // After the job ends, keep the cluster running until interrupted.
  bool keep_running = false;
  // Longest wait for the processes to come up and the workers to register.
  absl::Duration startup_timeout = absl::Seconds(30);
  // Longest wait for each process to exit after SIGTERM.
  absl::Duration shutdown_grace = absl::Seconds(10);
  // Output format and RPC timeouts for the embedded watch.
  CliOptions cli;
};

// Makes the spec's paths the user's: a relative output_dir and replay paths
// are taken relative to `base_dir`, an empty output_dir becomes
// `run_dir`/output, and a program without a working_dir runs in `base_dir`
// (so its relative argv names files where pshardctl was started).
void ResolveUserPaths(const std::string& base_dir, const std::string& run_dir,
                      v1::JobSpec& spec);

// The default job spec, parsed and validated.
absl::StatusOr<v1::JobSpec> DefaultLocalJobSpec();

// Where pshard-coordinator (package "server") or pshard-worker (package
// "worker") is: `bin_dir`/name if bin_dir is set; otherwise the first
// executable among: the directory of `self_path`, its ../<package>/ (the
// bazel-bin tree), and the runfiles trees ($RUNFILES_DIR, <self>.runfiles,
// $TEST_SRCDIR). NotFound lists every place tried.
absl::StatusOr<std::string> FindSiblingBinary(const std::string& name,
                                              const std::string& package,
                                              const std::string& bin_dir,
                                              const std::string& self_path);

// Runs the local cluster and the job; returns the exit code (0 only if the
// job SUCCEEDED, 130 when `cancel` fired). Progress goes to io.out, problems
// to io.err. Waits are measured on `clock`.
int RunLocal(const LocalOptions& options, const CliIo& io,
             Cancellation* cancel, const Clock& clock = Clock::Real());

}  // namespace pshard::cli

#endif  // PSHARD_CLI_LOCAL_H_
