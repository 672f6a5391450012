// bazel run -c opt //bench/coordinator:coordinator_bench -- --workers=4096
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "bench/coordinator/coordinator_bench.h"

ABSL_FLAG(int, workers, 1024, "simulated workers");
ABSL_FLAG(int, world_size, 0, "ranks of the job (0: all workers)");
ABSL_FLAG(int, buckets, 1000, "buckets in the layout every rank reports");
ABSL_FLAG(int, parameters_per_bucket, 2, "parameters per bucket");
ABSL_FLAG(absl::Duration, steady, absl::Seconds(10),
          "heartbeat-only phase before the job");
ABSL_FLAG(int, status_qps, 20, "status queries per second");
ABSL_FLAG(int, list_page_size, 0,
          "page_size of ListWorkers (0: the server's default, 500)");
ABSL_FLAG(int, channels, 8,
          "gRPC connections the simulated workers share (real workers have "
          "one each)");
ABSL_FLAG(std::string, work_dir, "/tmp", "for the state file and logs");
ABSL_FLAG(absl::Duration, scrape_interval, absl::ZeroDuration(),
          "> 0: scrape the coordinator's /metrics this often (\"Scrape\")");
ABSL_FLAG(std::string, state_sync, "full",
          "the coordinator's --state_sync: full or normal (to measure what "
          "full costs)");

ABSL_FLAG(bool, tls, false,
          "mutual TLS between the simulated workers and the coordinator "
          "(certificates made in --work_dir/tls)");
ABSL_FLAG(bool, tokens, false,
          "access control on: one bearer token per simulated worker (role "
          "worker, its own name) and one admin token, in --work_dir/"
          "bench-tokens; every call carries its caller's token, and any call "
          "refused fails the run");

ABSL_FLAG(std::string, rendezvous, "none",
          "a full-mesh rendezvous before the layout reports: none, get_each "
          "(a KvGet per peer) or get_many (a KvGetMany per rank)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  pshard::bench::BenchOptions options;
  options.workers = absl::GetFlag(FLAGS_workers);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.buckets = absl::GetFlag(FLAGS_buckets);
  options.parameters_per_bucket = absl::GetFlag(FLAGS_parameters_per_bucket);
  options.steady = absl::GetFlag(FLAGS_steady);
  options.status_qps = absl::GetFlag(FLAGS_status_qps);
  options.list_page_size = absl::GetFlag(FLAGS_list_page_size);
  options.work_dir = absl::GetFlag(FLAGS_work_dir);
  options.state_sync = absl::GetFlag(FLAGS_state_sync);
  options.scrape_interval = absl::GetFlag(FLAGS_scrape_interval);
  options.channels = absl::GetFlag(FLAGS_channels);
  options.tls = absl::GetFlag(FLAGS_tls);
  options.tokens = absl::GetFlag(FLAGS_tokens);
  const std::string rendezvous = absl::GetFlag(FLAGS_rendezvous);
  using Rendezvous = pshard::bench::BenchOptions::Rendezvous;
  if (rendezvous == "get_each") {
    options.rendezvous = Rendezvous::kGetEach;
  } else if (rendezvous == "get_many") {
    options.rendezvous = Rendezvous::kGetMany;
  } else if (rendezvous != "none") {
    fprintf(stderr,
            "--rendezvous: must be none, get_each or get_many, got \"%s\"\n",
            rendezvous.c_str());
    return 2;
  }
  auto report = pshard::bench::RunCoordinatorBenchmark(options);
  if (!report.ok()) {
    fprintf(stderr, "benchmark failed: %s\n", report.status().ToString().c_str());
    return 1;
  }
  printf("workers=%d world_size=%d buckets=%d transport=%s access=%s "
         "rendezvous=%s\n%s",
         options.workers,
         options.world_size > 0 ? options.world_size : options.workers,
         options.buckets, options.tls ? "mutual_tls" : "plaintext",
         options.tokens ? "tokens" : "none", rendezvous.c_str(),
         report->ToString().c_str());
  return 0;
}
