#include <string>

#include "absl/strings/str_format.h"
#include "bench/coordinator/coordinator_bench.h"

namespace pshard {
namespace bench {

std::string BenchReport::ToString() const {
  std::string out;
  for (const auto& [phase, stats] : rpcs_by_phase) {
    absl::StrAppendFormat(&out, "[%s phase]\n%-19s %9s %7s %9s %9s %9s\n",
                          phase, "rpc", "count", "errors", "p50_ms", "p99_ms",
                          "max_ms");
    for (const auto& [method, s] : stats) {
      absl::StrAppendFormat(&out, "%-19s %9d %7d %9.3f %9.3f %9.3f\n", method,
                            s.count, s.errors, s.p50_ms, s.p99_ms, s.max_ms);
    }
  }
  absl::StrAppendFormat(&out, "register all workers:            %.3f s\n",
                        register_all_s);
  absl::StrAppendFormat(&out, "heartbeats/s (steady phase):     %.0f\n",
                        heartbeats_per_second);
  absl::StrAppendFormat(&out, "submit -> all RunJob delivered:  %.3f s\n",
                        run_job_delivery_s);
  absl::StrAppendFormat(
      &out,
      "last layout report (sent alone) -> its answer (assignment published inside): "
      "%.1f ms\n",
      last_report_ms);
  absl::StrAppendFormat(
      &out,
      "last layout report sent -> GetAssignment answered: first %.1f ms, all "
      "%.1f ms\n",
      assignment_first_ms, assignment_all_ms);
  absl::StrAppendFormat(&out, "assignment imbalance:            %.4f\n",
                        imbalance);
  absl::StrAppendFormat(&out,
                        "message bytes: layout report (rank 0) %d, fingerprint "
                        "report (other ranks) %d, assignment as a rank gets it %d\n",
                        layout_bytes, fingerprint_report_bytes, assignment_bytes);
  absl::StrAppendFormat(&out, "job state:                       %s\n", job_state);
  absl::StrAppendFormat(&out, "coordinator CPU steady phase:    %.1f%% of a core\n",
                        steady_cpu_percent);
  absl::StrAppendFormat(&out, "coordinator CPU job phase:       %.2f s\n",
                        job_cpu_seconds);
  for (const StepTime& s : steps) {
    absl::StrAppendFormat(
        &out,
        "  step %-14s %8.1f ms wall, %7.1f ms coordinator CPU, %7.1f ms "
        "load generator CPU\n",
        s.name, s.wall_ms, s.cpu_ms, s.load_generator_cpu_ms);
  }
  if (rendezvous_bytes_read > 0) {
    absl::StrAppendFormat(&out,
                          "rendezvous: %d record bytes read, %d KvGetMany "
                          "answers cut at the byte cap\n",
                          rendezvous_bytes_read, rendezvous_cut_answers);
  }
  absl::StrAppendFormat(&out, "coordinator CPU total:           %.2f s over %.1f s\n",
                        total_cpu_seconds, wall_seconds);
  absl::StrAppendFormat(&out, "coordinator RSS: %.1f MiB (peak %.1f MiB)\n",
                        rss_mb, peak_rss_mb);
  if (tokens > 0) {
    absl::StrAppendFormat(&out,
                          "access control: %d tokens, calls refused "
                          "(PERMISSION_DENIED/UNAUTHENTICATED): %d\n",
                          tokens, refused_calls);
  }
  return out;
}

}  // namespace bench
}  // namespace pshard
