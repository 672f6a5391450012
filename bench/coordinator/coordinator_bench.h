// The coordinator benchmark: the real pshard-coordinator binary under load
// from simulated workers over gRPC on loopback. N workers register and
// heartbeat at 1 Hz while a status client queries alongside; then one job of
// world_size ranks is submitted, every rank reports a bucket layout and
// parks in GetAssignment, and the job runs to completion. Reported: p50/p99
// latency per RPC, time from the last layout report to the published
// assignment, and the coordinator's CPU and memory.
#ifndef PSHARD_BENCH_COORDINATOR_COORDINATOR_BENCH_H_
#define PSHARD_BENCH_COORDINATOR_COORDINATOR_BENCH_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pshard {
namespace bench {

struct BenchOptions {
  int workers = 1024;
  // Ranks of the one job; 0 means `workers`.
  int world_size = 0;
  int buckets = 1000;
  int parameters_per_bucket = 2;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Heartbeat-only phase before the job is submitted.
  absl::Duration steady = absl::Seconds(10);
  // Status queries per second during the whole run.
  int status_qps = 20;
  // page_size of the status client's ListWorkers (0: the server's default,
  // 500).
  int list_page_size = 0;
  // Concurrent RegisterWorker / ReportBuckets / ReportResult calls.
  int max_in_flight = 128;
  // gRPC channels the simulated workers spread over.
  int channels = 8;
  // The coordinator's --worker_timeout (its default).
  absl::Duration worker_timeout = absl::Seconds(5);
  // Directory for the state file, port file and coordinator log.
  std::string work_dir;
  // The coordinator's --state_sync (full or normal).
  std::string state_sync = "full";
  // Extra time allowed for each phase.
  absl::Duration phase_timeout = absl::Seconds(180);
  // > 0: the coordinator serves --metrics_listen and a scraper GETs
  // /metrics this often, timed as "Scrape".
  absl::Duration scrape_interval = absl::ZeroDuration();
  // Mutual TLS between the simulated workers and the coordinator (a CA and
  // certificates made in work_dir/tls); otherwise plaintext.
  bool tls = false;
  // Access control on (with or without tls): the coordinator gets
  // --auth_tokens with one token per simulated worker (role worker, named
  // as that worker registers) and one for the bench's own JobService and
  // ClusterService calls (admin,submit), and every call carries its
  // caller's own token ("authorization: Bearer ..." metadata per call, as
  // the channels are shared). Any call refused (PERMISSION_DENIED or
  // UNAUTHENTICATED) makes the run an error.
  bool tokens = false;
  // For the smoke test of that check: workers 0 and 1 present each other's
  // tokens, which the coordinator must refuse.
  bool swap_two_tokens = false;
  // A full-mesh rendezvous between RunJob and the layout reports (step
  // "1b_rendezvous"), as Gloo's TCP mesh makes one: every rank puts a record
  // of 128 + 2*(world-1) bytes (tcp_link.h's), then reads every peer's.
  // kNone leaves it out; kGetEach reads with one KvGet per peer (world *
  // (world-1) calls, the worker before KvGetMany); kGetMany with one
  // KvGetMany per rank, asked again from the first key not answered when an
  // answer is cut at the coordinator's 256 KiB.
  enum class Rendezvous { kNone, kGetEach, kGetMany };
  Rendezvous rendezvous = Rendezvous::kNone;
};

struct LatencyStats {
  int64_t count = 0;
  int64_t errors = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

struct BenchReport {
  // Over the whole run, and per phase: "steady" (registered workers
  // heartbeating, status queries) and "job" (submit to SUCCEEDED: RunJob
  // delivery, layout reports, parked GetAssignment, results), and the job
  // phase's steps: "job/1_run_job" (submit -> every rank has its RunJob),
  // "job/2_layouts" (every rank but the last reports its layout),
  // "job/3_assignment" (the last report -> every rank has the assignment),
  // "job/4_results" (progress and results); "job/start" is steps 1-3 (and
  // "job/1b_rendezvous" between 1 and 2 when BenchOptions::rendezvous is
  // on).
  std::map<std::string, LatencyStats> rpcs;
  std::map<std::string, std::map<std::string, LatencyStats>> rpcs_by_phase;
  double register_all_s = 0;
  // Submit -> every rank has its RunJob directive.
  double run_job_delivery_s = 0;
  // Last ReportBuckets sent -> its answer (the coordinator publishes the
  // assignment before answering the report that completes the set).
  double last_report_ms = 0;
  // Last ReportBuckets sent -> first / every GetAssignment answered.
  double assignment_first_ms = 0;
  double assignment_all_ms = 0;
  double imbalance = 0;
  // Sizes on the wire: rank 0's layout report (the ReportBucketsRequest
  // with job id, epoch, rank and worker id too), another rank's fingerprint
  // report, and the assignment as rank 0 receives it (owners view).
  int64_t layout_bytes = 0;
  int64_t fingerprint_report_bytes = 0;
  int64_t assignment_bytes = 0;
  std::string job_state;
  // Coordinator process: CPU seconds and share of one core per phase.
  double steady_cpu_percent = 0;
  double job_cpu_seconds = 0;
  // The job phase's steps (see rpcs_by_phase), in order.
  struct StepTime {
    std::string name;
    double wall_ms = 0;
    double cpu_ms = 0;
    // This process (the simulated workers and status client), which shares
    // the machine's cores with the coordinator.
    double load_generator_cpu_ms = 0;
  };
  std::vector<StepTime> steps;
  double total_cpu_seconds = 0;
  double wall_seconds = 0;
  double rss_mb = 0;
  double peak_rss_mb = 0;
  // Heartbeats sent in the steady phase and per second.
  double heartbeats_per_second = 0;
  // With tokens: the entries of the coordinator's token table (workers + 1)
  // and the calls it refused (always 0 in a report: any makes the run an
  // error).
  int tokens = 0;
  int64_t refused_calls = 0;
  // With a rendezvous: the records' bytes the ranks read (world * (world-1)
  // records), and the KvGetMany answers cut at the coordinator's byte cap
  // (each asked again for the rest).
  int64_t rendezvous_bytes_read = 0;
  int64_t rendezvous_cut_answers = 0;

  std::string ToString() const;
};

// PermissionDenied, with the refusals by method, when tokens are on and the
// coordinator refused any call.
absl::StatusOr<BenchReport> RunCoordinatorBenchmark(const BenchOptions& options);

}  // namespace bench
}  // namespace pshard

#endif  // PSHARD_BENCH_COORDINATOR_COORDINATOR_BENCH_H_
