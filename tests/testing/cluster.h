// A local pshard cluster for end-to-end tests: the real pshard-coordinator
// and N real pshard-worker processes on loopback (free ports, port files),
// with pshardctl's CoordinatorClient to drive and observe them. Every wait
// polls with a deadline.
#ifndef PSHARD_TESTS_TESTING_CLUSTER_H_
#define PSHARD_TESTS_TESTING_CLUSTER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/worker_status.pb.h"
#include "security/certificate_directory.h"
#include "security/transport.h"
#include "tests/testing/coordinator.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {

struct ClusterOptions {
  int workers = 2;
  // The coordinator's --heartbeat_interval and --worker_timeout: short, so
  // that a lost worker is noticed quickly.
  absl::Duration heartbeat_interval = absl::Milliseconds(100);
  absl::Duration worker_timeout = absl::Seconds(2);
  // Worker i registers as <worker_name_prefix><i>.
  std::string worker_name_prefix = "worker-";
  // Extra flags for every worker; "{i}" in one becomes the worker's index
  // (e.g. "--log_dir=/tmp/x/logs-{i}").
  std::vector<std::string> worker_flags;
  // Worker i runs `pshard-worker --local_ranks=local_ranks[i]` where given
  // (1 past the end): with N > 1 it is a supervisor of N workers named
  // <prefix><i>:<j>, which share its token; their status ports come from
  // its --port_file's ".<j>" files.
  std::vector<int> local_ranks;
  // Extra flags for the coordinator.
  std::vector<std::string> coordinator_flags;
  // Mutual TLS: a CA made for the cluster in dir()/tls, a certificate for
  // the coordinator, each worker (its name) and the test's client
  // ("pshardctl"), every server requiring client certificates. Otherwise
  // plaintext on loopback (--insecure).
  bool tls = false;
  // With tls: how often the processes re-read their certificate files.
  absl::Duration tls_reload_interval = absl::Seconds(1);
  // Access control on every server (--auth_tokens): a token each for
  // "admin" (admin), "alice" and "bob" (submit), "viewer" (read), and each
  // worker (its name, role worker), which it presents with --token_file.
  // The test's client presents admin's token unless told otherwise
  // (client_security_as). Works with tls and in plaintext.
  bool access = false;
};

class Cluster {
 public:
  // Starts the coordinator and the workers and waits until every worker is
  // registered and IDLE.
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(
      const ClusterOptions& options);

  ~Cluster();

  const std::string& dir() const { return dir_; }
  // host:port of the coordinator (for pshardctl --coordinator).
  const std::string& address() const { return address_; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  Subprocess& worker(int i) { return *workers_[i]; }
  // host:port of worker i's WorkerStatus server (with local_ranks: of the
  // i-th registered process, counting every supervisor's children in order).
  std::string worker_status_address(int i) const;
  // How the test's clients reach the servers, as settings and as pshardctl
  // flags.
  const security::TransportSecurity& client_security() const {
    return client_security_;
  }
  std::vector<std::string> ClientFlags() const;
  // With access: the client settings presenting `principal`'s token ("" for
  // none), and that token's file (for pshardctl --token_file).
  security::TransportSecurity client_security_as(
      const std::string& principal) const;
  std::string token_file(const std::string& principal) const;
  // With tls: the cluster's certificates (to issue or rotate more).
  security::CertificateDirectory* certificates() {
    return certificates_ ? &*certificates_ : nullptr;
  }

  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  // ShardService.GetShardAssignment: the job's latest assignment.
  absl::StatusOr<v1::ShardAssignment> ShardAssignment(const std::string& id);
  // Polls until the job is SUCCEEDED, FAILED or CANCELLED.
  absl::StatusOr<v1::Job> WaitForEnd(const std::string& id,
                                     absl::Duration timeout);
  // The job's whole event log (WatchJob from the start; the job must end).
  absl::StatusOr<std::vector<v1::JobEvent>> Events(const std::string& id,
                                                   absl::Duration timeout);
  absl::StatusOr<std::vector<v1::WorkerInfo>> Workers(bool include_lost);
  absl::StatusOr<v1::GetWorkerStatusResponse> WorkerStatus(int i);
  // grpc.health.v1.Health/Check on worker i's server, for `service` ("" is
  // the server's overall health): OK when it answers SERVING.
  absl::Status WorkerHealth(int i, const std::string& service = "");
  // Polls until `count` workers are IDLE.
  bool WaitForIdle(int count, absl::Duration timeout);

  // kill -9 of the coordinator (the workers go on without it).
  absl::Status KillCoordinator();
  // A new coordinator on the same state file and port; the workers find it
  // again on their own (as behind a Kubernetes Service). Returns once it
  // listens.
  absl::Status RestartCoordinator();
  absl::Status KillAndRestartCoordinator() {
    absl::Status killed = KillCoordinator();
    return killed.ok() ? RestartCoordinator() : killed;
  }

  // The last lines of every process's log, for failure messages.
  std::string Logs() const;
  // The files the coordinator's and worker i's stdout and stderr go to.
  const std::string& coordinator_log_path() const { return logs_[0]; }
  const std::string& worker_log_path(int i) const { return logs_[1 + i]; }

 private:
  Cluster() = default;

  std::string dir_;
  std::string address_;
  CoordinatorOptions coordinator_options_;  // with the port it got
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::vector<int> worker_ports_;
  std::vector<std::string> logs_;
  std::unique_ptr<cli::CoordinatorClient> client_;
  security::TransportSecurity client_security_;
  std::optional<security::CertificateDirectory> certificates_;
  std::string access_dir_;  // empty without access
};

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_TESTING_CLUSTER_H_
