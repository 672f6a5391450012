#include "cli/local.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/child_process.h"
#include "cli/format.h"
#include "common/job_spec.h"
#include "common/port_file.h"
#include "common/status_macros.h"
#include "security/access_directory.h"
#include "security/access_policy.h"
#include "security/certificate_directory.h"
#include "security/server_access_flags.h"
#include "security/transport.h"
#include "security/transport_flags.h"

namespace pshard::cli {
namespace {

// The built-in job, generated from examples/mlp_adam_2workers.json.
constexpr char kDefaultJobSpecJson[] =
#include "cli/default_job_spec.inc"
    ;

constexpr int kMaxLocalWorkers = 64;

bool IsExecutable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Absolute(const std::string& base, const std::string& path) {
  if (path.empty() || path[0] == '/' || base.empty()) return path;
  return absl::StrCat(base, "/", path);
}

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::InternalError(absl::StrCat(
            "cannot create directory ", partial, ": ", std::strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeRunDir(const std::string& requested) {
  if (!requested.empty()) {
    RETURN_IF_ERROR(MakeDirs(requested));
    // An earlier run's state would be restored by the new coordinator (its
    // workers still registered until they time out) and its port files read
    // before the new processes write theirs: refuse rather than mix runs.
    const std::string state = absl::StrCat(requested, "/coordinator.db");
    if (access(state.c_str(), F_OK) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--run_dir: ", requested, " holds an earlier run (", state,
          "); pass a new directory or remove that one"));
    }
    return requested;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat((tmp != nullptr && tmp[0] != '\0') ? tmp : "/tmp",
                   "/pshard-local-XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a run directory ",
                                            pattern, ": ",
                                            std::strerror(errno)));
  }
  return std::string(buffer.data());
}


absl::Status ChildDied(ChildProcess& child) {
  std::string tail = child.LogTail(15);
  return absl::AbortedError(absl::StrCat(
      child.name(), " (pid ", child.pid(), ") ", child.DescribeExit(),
      "; its log is ", child.log_path(),
      tail.empty() ? "" : absl::StrCat(", ending with:\n", tail)));
}

constexpr absl::Duration kLocalCertificateLifetime = absl::Hours(24 * 30);

std::vector<std::string> Concat(std::vector<std::string> a,
                                const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string WorkerName(int i) { return absl::StrCat("local-worker-", i); }

// --device: the workers' devices, checked before anything starts.
absl::Status ValidateLocalDevice(absl::string_view device) {
  if (device == "cpu" || device == "cuda") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--device: \"", device,
      "\" is not a local cluster's device; use cpu, or cuda (worker i on "
      "cuda:i)"));
}

// Worker i's --device.
std::string WorkerDevice(absl::string_view device, int i) {
  return device == "cuda" ? absl::StrCat("cuda:", i) : "cpu";
}

// "2 CPU workers", "2 GPU workers (cuda:0..cuda:1)".
std::string DescribeWorkers(absl::string_view device, int workers) {
  std::string text =
      absl::StrCat(workers, device == "cuda" ? " GPU worker" : " CPU worker",
                   workers == 1 ? "" : "s");
  if (device == "cuda") {
    absl::StrAppend(&text, " (cuda:0",
                    workers == 1 ? "" : absl::StrCat("..cuda:", workers - 1),
                    ")");
  }
  return text;
}

class LocalCluster {
 public:
  LocalCluster(const LocalOptions& options, const CliIo& io,
               Cancellation* cancel, const Clock& clock)
      : options_(options), io_(io), cancel_(cancel), clock_(clock) {}

  ~LocalCluster() { Shutdown(); }

  absl::Status Start(const std::string& run_dir, int workers) {
    ASSIGN_OR_RETURN(std::string coordinator_bin,
                     FindSiblingBinary("pshard-coordinator", "server",
                                       options_.bin_dir, options_.self_path));
    ASSIGN_OR_RETURN(std::string worker_bin,
                     FindSiblingBinary("pshard-worker", "worker",
                                       options_.bin_dir, options_.self_path));
    const absl::Time deadline = clock_.Now() + options_.startup_timeout;
    // Secure by default like a real cluster; --insecure for plaintext.
    // Every process holds a certificate from a CA made for this run, in
    // <run_dir>/tls, and every server requires one (mutual TLS). Workers are
    // known by their certificates' names (role worker); pshardctl presents
    // an admin token, <run_dir>/tls/admin.token.
    std::optional<security::CertificateDirectory> certificates;
    std::vector<std::string> access_flags;
    security::TransportSecurity coordinator_tls = security::Plaintext();
    client_security_ = security::Plaintext();
    token_file_.clear();
    if (!options_.cli.security.insecure) {
      ASSIGN_OR_RETURN(certificates,
                       security::CertificateDirectory::Create(
                           absl::StrCat(run_dir, "/tls"),
                           "pshard local CA",
                           absl::Now(), kLocalCertificateLifetime));
      ASSIGN_OR_RETURN(coordinator_tls,
                       certificates->Issue("pshard-coordinator"));
      coordinator_tls.require_client_certificate = true;
      ASSIGN_OR_RETURN(client_security_, certificates->Issue("pshardctl"));
      security::AccessDirectory access(certificates->dir());
      ASSIGN_OR_RETURN(token_file_,
                       access.AddToken("admin", {security::Role::kAdmin}));
      for (int i = 0; i < workers; ++i) {
        access.AddIdentity(WorkerName(i), {security::Role::kWorker});
      }
      RETURN_IF_ERROR(access.Write());
      access_flags = security::AccessFlags(access.settings());
      ASSIGN_OR_RETURN(client_security_.bearer_token,
                       security::ReadTokenFile(token_file_, "admin.token"));
    }

    const std::string coordinator_port_file =
        absl::StrCat(run_dir, "/coordinator.port");
    ASSIGN_OR_RETURN(
        coordinator_,
        ChildProcess::Start(
            "pshard-coordinator",
            Concat(Concat({coordinator_bin, "--listen=127.0.0.1:0",
                           absl::StrCat("--port_file=", coordinator_port_file),
                           absl::StrCat("--state_path=", run_dir,
                                        "/coordinator.db")},
                          security::TransportSecurityFlags(coordinator_tls)),
                   access_flags),
            absl::StrCat(run_dir, "/coordinator.log"), {}, clock_));
    ASSIGN_OR_RETURN(int port,
                     WaitForPort(*coordinator_, coordinator_port_file, deadline));
    address_ = absl::StrCat("127.0.0.1:", port);
    *io_.out << "coordinator  pid " << coordinator_->pid() << "  " << address_
             << "  log " << coordinator_->log_path() << "\n";

    for (int i = 0; i < workers; ++i) {
      const std::string name = WorkerName(i);
      security::TransportSecurity worker_tls = security::Plaintext();
      if (certificates.has_value()) {
        ASSIGN_OR_RETURN(worker_tls, certificates->Issue(name));
        worker_tls.require_client_certificate = true;
      }
      ASSIGN_OR_RETURN(
          std::unique_ptr<ChildProcess> worker,
          ChildProcess::Start(
              absl::StrCat("pshard-worker ", i),
              Concat(
                  {worker_bin, absl::StrCat("--coordinator=", address_),
                   absl::StrCat("--name=", name), "--listen=127.0.0.1:0",
                   absl::StrCat("--port_file=", run_dir, "/", name, ".port"),
                   "--host=127.0.0.1",
                   absl::StrCat("--device=", WorkerDevice(options_.device, i)),
                   // Program jobs' output:
                   // <run_dir>/program-logs/<job>/rank-R.log.
                   absl::StrCat("--log_dir=", run_dir, "/program-logs")},
                  Concat(security::TransportSecurityFlags(worker_tls),
                         access_flags)),
              absl::StrCat(run_dir, "/", name, ".log"), {}, clock_));
      workers_.push_back(std::move(worker));
    }
    for (int i = 0; i < workers; ++i) {
      ASSIGN_OR_RETURN(
          int worker_port,
          WaitForPort(*workers_[i],
                      absl::StrCat(run_dir, "/", WorkerName(i), ".port"),
                      deadline));
      *io_.out << "worker " << i << "     pid " << workers_[i]->pid()
               << "  127.0.0.1:" << worker_port << "  log "
               << workers_[i]->log_path() << "\n";
    }
    io_.out->flush();

    if (!client_security_.insecure) {
      *io_.out << "TLS          CA " << client_security_.ca_file
               << "  pshardctl's certificate " << client_security_.certificate_file
               << "\n"
               << "access       admin token " << token_file_ << "  tokens "
               << certificates->dir() << "/tokens\n";
    }
    io_.out->flush();
    ASSIGN_OR_RETURN(client_,
                     CoordinatorClient::Connect(address_, client_security_,
                                                options_.cli.connect_timeout,
                                                options_.cli.rpc_timeout));
    return WaitForIdleWorkers(workers, deadline);
  }

  CoordinatorClient& client() { return *client_; }
  const std::string& address() const { return address_; }
  // The pshardctl flags that reach the cluster: its certificate, or
  // plaintext.
  std::string ConnectionFlags() const {
    std::vector<std::string> flags =
        security::TransportSecurityFlags(client_security_);
    if (!token_file_.empty()) {
      flags.push_back(absl::StrCat("--token_file=", token_file_));
    }
    return absl::StrCat("--coordinator=", address_, " ",
                        absl::StrJoin(flags, " "));
  }

  // Any child that has died on its own, as an error naming it.
  absl::Status CheckChildren() {
    if (coordinator_ != nullptr && !coordinator_->Running()) {
      return ChildDied(*coordinator_);
    }
    for (auto& worker : workers_) {
      if (!worker->Running()) return ChildDied(*worker);
    }
    return absl::OkStatus();
  }

  // Stops the workers first (they abort any job and leave the pool), then
  // the coordinator; SIGKILL for anything that outlives the grace period.
  void Shutdown() {
    if (stopped_) return;
    stopped_ = true;
    client_.reset();
    int stopped = 0;
    for (auto& worker : workers_) {
      if (worker->Running()) worker->Signal(SIGTERM);
    }
    for (auto& worker : workers_) {
      absl::Status s = worker->Stop(options_.shutdown_grace);
      if (!s.ok()) PrintError(*io_.err, s);
      ++stopped;
    }
    if (coordinator_ != nullptr) {
      absl::Status s = coordinator_->Stop(options_.shutdown_grace);
      if (!s.ok()) PrintError(*io_.err, s);
    }
    if (coordinator_ != nullptr || stopped > 0) {
      *io_.out << "stopped " << stopped << " worker"
               << (stopped == 1 ? "" : "s")
               << (coordinator_ != nullptr ? " and the coordinator" : "")
               << "\n";
      io_.out->flush();
    }
    workers_.clear();
    coordinator_.reset();
  }

 private:
  absl::StatusOr<int> WaitForPort(ChildProcess& child, const std::string& path,
                                  absl::Time deadline) {
    while (true) {
      absl::StatusOr<int> port = pshard::ReadPortFile(path);
      if (port.ok()) return port;
      if (!child.Running()) return ChildDied(child);
      if (cancel_ != nullptr && cancel_->cancelled()) {
        return absl::CancelledError("interrupted");
      }
      if (clock_.Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            child.name(), " did not start serving within ",
            absl::FormatDuration(options_.startup_timeout), " (no port in ",
            path, "); see ", child.log_path()));
      }
      clock_.SleepFor(absl::Milliseconds(20));
    }
  }

  absl::Status WaitForIdleWorkers(int want, absl::Time deadline) {
    int idle = 0;
    while (true) {
      RETURN_IF_ERROR(CheckChildren());
      if (cancel_ != nullptr && cancel_->cancelled()) {
        return absl::CancelledError("interrupted");
      }
      ASSIGN_OR_RETURN(std::vector<v1::WorkerInfo> pool,
                       client_->ListWorkers(false));
      idle = 0;
      for (const v1::WorkerInfo& w : pool) idle += (w.state() == v1::IDLE);
      if (idle >= want) return absl::OkStatus();
      if (clock_.Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "only ", idle, " of ", want, " workers registered with the "
            "coordinator within ", absl::FormatDuration(options_.startup_timeout),
            "; see the worker logs in the run directory"));
      }
      clock_.SleepFor(absl::Milliseconds(50));
    }
  }

  const LocalOptions& options_;
  const CliIo& io_;
  Cancellation* cancel_;
  const Clock& clock_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<CoordinatorClient> client_;
  std::string address_;
  security::TransportSecurity client_security_;
  // pshardctl's admin token (empty with --insecure).
  std::string token_file_;
  bool stopped_ = false;
};

// Polls until the job's shard assignment exists (printing it) or the job
// ends. An assignment that never appears is not an error here: the watch
// that follows reports why the job ended.
absl::Status ShowShardsWhenReady(LocalCluster& cluster,
                                 const std::string& job_id,
                                 absl::Duration timeout, const CliIo& io,
                                 OutputFormat format, Cancellation* cancel,
                                 const Clock& clock) {
  const absl::Time deadline = clock.Now() + timeout;
  while (true) {
    if (cancel != nullptr && cancel->cancelled()) {
      return absl::CancelledError("interrupted");
    }
    RETURN_IF_ERROR(cluster.CheckChildren());
    absl::StatusOr<v1::ShardAssignment> assignment =
        cluster.client().GetShardAssignment(job_id);
    if (assignment.ok()) {
      *io.out << "\n"
              << (format == OutputFormat::kJson ? ToJson(*assignment)
                                                : FormatShardTable(*assignment))
              << "\n";
      io.out->flush();
      return absl::OkStatus();
    }
    if (assignment.status().code() != absl::StatusCode::kFailedPrecondition) {
      return assignment.status();
    }
    ASSIGN_OR_RETURN(v1::Job job, cluster.client().GetJob(job_id));
    if (IsTerminal(job.state())) return absl::OkStatus();
    if (clock.Now() >= deadline) {
      *io.err << "pshardctl: no shard assignment for " << job_id << " after "
              << absl::FormatDuration(timeout) << "; still "
              << JobStateName(job.state()) << ", watching anyway\n";
      return absl::OkStatus();
    }
    clock.SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace

void ResolveUserPaths(const std::string& base_dir, const std::string& run_dir,
                      v1::JobSpec& spec) {
  if (spec.output_dir().empty()) {
    spec.set_output_dir(absl::StrCat(run_dir, "/output"));
  } else {
    spec.set_output_dir(Absolute(base_dir, spec.output_dir()));
  }
  if (spec.has_replay()) {
    auto* replay = spec.mutable_replay();
    replay->set_params_path(Absolute(base_dir, replay->params_path()));
    replay->set_gradients_dir(Absolute(base_dir, replay->gradients_dir()));
  }
  // A program's relative argv and paths are the user's too: it runs where
  // pshardctl was started, not in the workers' working directory (the
  // runfiles tree under `bazel run`).
  if (spec.has_program() && spec.program().working_dir().empty()) {
    spec.mutable_program()->set_working_dir(base_dir);
  }
}

absl::StatusOr<v1::JobSpec> DefaultLocalJobSpec() {
  return ParseJobSpecJson(kDefaultJobSpecJson);
}

absl::StatusOr<std::string> FindSiblingBinary(const std::string& name,
                                              const std::string& package,
                                              const std::string& bin_dir,
                                              const std::string& self_path) {
  std::vector<std::string> candidates;
  if (!bin_dir.empty()) {
    candidates.push_back(absl::StrCat(bin_dir, "/", name));
  } else {
    const std::string self_dir = DirName(self_path);
    candidates.push_back(absl::StrCat(self_dir, "/", name));
    candidates.push_back(absl::StrCat(self_dir, "/../", package, "/", name));
    const std::string rel = absl::StrCat("pshard/", package, "/", name);
    for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
      const char* dir = std::getenv(env);
      if (dir != nullptr && dir[0] != '\0') {
        candidates.push_back(absl::StrCat(dir, "/", rel));
      }
    }
    candidates.push_back(absl::StrCat(self_path, ".runfiles/", rel));
  }
  for (const std::string& path : candidates) {
    if (IsExecutable(path)) return path;
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find ", name, " (tried ", absl::StrJoin(candidates, ", "),
      "); build it (bazel build //", package, ":", name,
      ") or pass --bin_dir"));
}

int RunLocal(const LocalOptions& options, const CliIo& io,
             Cancellation* cancel, const Clock& clock) {
  auto fail = [&io](const absl::Status& status) {
    PrintError(*io.err, status);
    return ExitCodeFor(status);
  };

  // 1. The job: validated before anything is started.
  absl::StatusOr<v1::JobSpec> loaded =
      options.spec_path.empty() ? DefaultLocalJobSpec()
                                : LoadJobSpecFile(options.spec_path);
  if (!loaded.ok()) return fail(loaded.status());
  v1::JobSpec spec = *std::move(loaded);
  if (options.workers < 0 || options.workers > kMaxLocalWorkers) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--workers: must be in 1..", kMaxLocalWorkers, " for a local cluster, got ",
        options.workers)));
  }
  if (absl::Status s = ValidateLocalDevice(options.device); !s.ok()) {
    return fail(s);
  }
  if (absl::Status s = CheckTimeouts(options.cli); !s.ok()) return fail(s);
  if (options.workers > 0) spec.set_world_size(options.workers);
  const int workers = spec.world_size();
  if (workers > kMaxLocalWorkers) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "world_size: ", workers, " is more than a local cluster runs (",
        kMaxLocalWorkers, "); pass --workers")));
  }

  absl::StatusOr<std::string> run_dir = MakeRunDir(options.run_dir);
  if (!run_dir.ok()) return fail(run_dir.status());
  ResolveUserPaths(options.base_dir, *run_dir, spec);
  if (absl::Status s = ValidateJobSpec(spec); !s.ok()) return fail(s);
  if (absl::Status s = MakeDirs(spec.output_dir()); !s.ok()) return fail(s);

  *io.out << "pshard local cluster: " << DescribeWorkers(options.device, workers)
          << ", run directory " << *run_dir
          << "\n";
  io.out->flush();

  // 2. The cluster.
  LocalCluster cluster(options, io, cancel, clock);
  if (absl::Status s = cluster.Start(*run_dir, workers); !s.ok()) {
    cluster.Shutdown();
    return fail(s);
  }

  // 3. The job.
  absl::StatusOr<v1::Job> submitted = cluster.client().SubmitJob(spec);
  if (!submitted.ok()) {
    cluster.Shutdown();
    return fail(submitted.status());
  }
  const std::string job_id = submitted->id();
  *io.out << "submitted " << job_id << " \"" << spec.name() << "\": "
          << spec.steps() << " steps on " << workers << " workers; "
          << "inspect it with: pshardctl " << cluster.ConnectionFlags()
          << " get " << job_id << "\n";
  io.out->flush();

  absl::Status status = ShowShardsWhenReady(
      cluster, job_id,
      absl::Seconds(spec.collective_timeout_seconds() > 0
                        ? spec.collective_timeout_seconds()
                        : 60) +
          options.startup_timeout,
      io, options.cli.output, cancel, clock);
  absl::StatusOr<v1::Job> final_job =
      status.ok() ? WatchUntilDone(cluster.client(), job_id, options.cli, io,
                                   cancel, clock)
                  : absl::StatusOr<v1::Job>(status);
  if (!final_job.ok()) {
    if (final_job.status().code() == absl::StatusCode::kCancelled) {
      *io.err << "pshardctl: interrupted; cancelling " << job_id
              << " and stopping the local cluster\n";
      absl::StatusOr<v1::Job> cancelled =
          cluster.client().CancelJob(job_id, "interrupted (pshardctl local)");
      (void)cancelled;  // Best effort: the cluster goes away regardless.
    } else {
      // A lost stream is often a dead process: say which, with its log.
      absl::Status died = cluster.CheckChildren();
      PrintError(*io.err, died.ok() ? final_job.status() : died);
    }
    cluster.Shutdown();
    return ExitCodeFor(final_job.status());
  }

  *io.out << FormatOutcome(*final_job);
  // A program writes its own results; the built-in workloads write these.
  if (final_job->state() == v1::SUCCEEDED && final_job->output_path().empty() &&
      !spec.has_program()) {
    *io.out << "final parameters: " << spec.output_dir()
            << "/params.safetensors\n";
  }
  if (spec.has_program()) {
    *io.out << "program output: " << *run_dir << "/program-logs/" << job_id
            << "/rank-<R>.log\n";
  }
  *io.out << "logs and state: " << *run_dir << "\n";
  io.out->flush();

  if (options.keep_running && (cancel == nullptr || !cancel->cancelled())) {
    *io.out << "cluster still running at " << cluster.address()
            << "; press Ctrl-C to stop it\n"
            << "reach it with: pshardctl " << cluster.ConnectionFlags()
            << " COMMAND\n";
    io.out->flush();
    while (cancel != nullptr && !cancel->cancelled()) {
      if (!cluster.CheckChildren().ok()) break;
      clock.SleepFor(absl::Milliseconds(100));
    }
  }
  cluster.Shutdown();
  return final_job->state() == v1::SUCCEEDED ? kExitOk : kExitError;
}

}  // namespace pshard::cli
