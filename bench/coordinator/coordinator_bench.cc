#include "bench/coordinator/coordinator_bench.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace bench {
namespace {

using Clock = std::chrono::system_clock;

// Latencies per method, from any thread.
class Recorder {
 public:
  void Add(const std::string& method, absl::Duration d, bool ok) {
    absl::MutexLock lock(&mu_);
    auto& e = entries_[method];
    e.samples.push_back(absl::ToDoubleMilliseconds(d));
    if (!ok) ++e.errors;
  }
  std::map<std::string, LatencyStats> Stats() {
    absl::MutexLock lock(&mu_);
    std::map<std::string, LatencyStats> out;
    for (auto& [method, e] : entries_) {
      std::vector<double>& v = e.samples;
      std::sort(v.begin(), v.end());
      LatencyStats s;
      s.count = v.size();
      s.errors = e.errors;
      if (!v.empty()) {
        s.p50_ms = v[v.size() / 2];
        s.p99_ms = v[std::min(v.size() - 1, v.size() * 99 / 100)];
        s.max_ms = v.back();
      }
      out[method] = s;
    }
    return out;
  }

 private:
  struct Entry {
    std::vector<double> samples;
    int64_t errors = 0;
  };
  absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// Limits concurrent async calls.
class Gate {
 public:
  explicit Gate(int n) : free_(n) {}
  void Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* f) { return *f > 0; }, &free_));
    --free_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    ++free_;
  }
  // Waits until every permit is back (all calls done) or the deadline.
  bool Drain(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    struct Arg {
      int* free;
      int n;
    } arg{&free_, n};
    return mu_.AwaitWithTimeout(
        absl::Condition(+[](Arg* a) { return *a->free == a->n; }, &arg),
        timeout);
  }

 private:
  absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_);
};

struct ProcStats {
  double cpu_seconds = 0;
  double rss_mb = 0;
  double hwm_mb = 0;
};

ProcStats ReadProc(pid_t pid) {
  ProcStats s;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  // Fields after the ")" closing the command name; utime and stime are the
  // 14th and 15th fields overall.
  const size_t close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    int64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoll(field);
      if (i == 15) stime = std::stoll(field);
    }
    s.cpu_seconds = static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
  }
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  while (std::getline(status, line)) {
    long kb = 0;
    if (sscanf(line.c_str(), "VmRSS: %ld kB", &kb) == 1) s.rss_mb = kb / 1024.0;
    if (sscanf(line.c_str(), "VmHWM: %ld kB", &kb) == 1) s.hwm_mb = kb / 1024.0;
  }
  return s;
}

google::protobuf::Duration ToProto(absl::Duration d) {
  google::protobuf::Duration out;
  out.set_seconds(absl::ToInt64Seconds(d));
  out.set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(d - absl::Seconds(out.seconds()))));
  return out;
}

struct SimState {
  std::string name;
  std::string id;
  std::atomic<bool> in_flight{false};
  absl::Mutex mu;
  std::string job_id ABSL_GUARDED_BY(mu);
  int64_t epoch ABSL_GUARDED_BY(mu) = 0;
  int rank ABSL_GUARDED_BY(mu) = -1;
};

}  // namespace

std::string BenchReport::ToString() const {
  std::string out;
  absl::StrAppendFormat(&out, "%-16s %9s %7s %9s %9s %9s\n", "rpc", "count",
                        "errors", "p50_ms", "p99_ms", "max_ms");
  for (const auto& [method, s] : rpcs) {
    absl::StrAppendFormat(&out, "%-16s %9d %7d %9.3f %9.3f %9.3f\n", method,
                          s.count, s.errors, s.p50_ms, s.p99_ms, s.max_ms);
  }
  absl::StrAppendFormat(&out, "register all workers:            %.3f s\n",
                        register_all_s);
  absl::StrAppendFormat(&out, "heartbeats/s (steady phase):     %.0f\n",
                        heartbeats_per_second);
  absl::StrAppendFormat(&out, "submit -> all RunJob delivered:  %.3f s\n",
                        run_job_delivery_s);
  absl::StrAppendFormat(
      &out, "last layout report -> assignment: first %.1f ms, all %.1f ms\n",
      assignment_first_ms, assignment_all_ms);
  absl::StrAppendFormat(&out, "assignment imbalance:            %.4f\n",
                        imbalance);
  absl::StrAppendFormat(&out, "job state:                       %s\n", job_state);
  absl::StrAppendFormat(&out, "coordinator CPU steady phase:    %.1f%% of a core\n",
                        steady_cpu_percent);
  absl::StrAppendFormat(&out, "coordinator CPU job phase:       %.2f s\n",
                        job_cpu_seconds);
  absl::StrAppendFormat(&out, "coordinator CPU total:           %.2f s over %.1f s\n",
                        total_cpu_seconds, wall_seconds);
  absl::StrAppendFormat(&out, "coordinator RSS: %.1f MiB (peak %.1f MiB)\n",
                        rss_mb, peak_rss_mb);
  return out;
}

absl::StatusOr<BenchReport> RunCoordinatorBenchmark(const BenchOptions& opt) {
  const int n = opt.workers;
  const int world = opt.world_size > 0 ? opt.world_size : n;
  if (n < 1 || world > n) {
    return absl::InvalidArgumentError("need 1 <= world_size <= workers");
  }
  BenchReport report;
  Recorder rec;
  const std::string port_file = opt.work_dir + "/port";
  const std::string state = opt.work_dir + "/bench-state.db";
  for (const std::string& p : {port_file, state, state + "-wal", state + "-shm"}) {
    std::remove(p.c_str());
  }
  ASSIGN_OR_RETURN(
      auto coordinator,
      testing::Subprocess::Start(
          {opt.coordinator_binary, "--listen=127.0.0.1:0",
           "--port_file=" + port_file, "--state_path=" + state,
           absl::StrCat("--heartbeat_interval=",
                        absl::FormatDuration(opt.heartbeat_interval))},
          {}, opt.work_dir + "/coordinator.log"));
  ASSIGN_OR_RETURN(int port, testing::WaitForPortFile(port_file, absl::Seconds(30)));
  const absl::Time t_begin = absl::Now();
  const ProcStats at_begin = ReadProc(coordinator->pid());
  const std::string address = absl::StrCat("127.0.0.1:", port);

  std::vector<std::unique_ptr<v1::WorkerControl::Stub>> stubs;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < std::max(1, opt.channels); ++i) {
    grpc::ChannelArguments args;
    args.SetInt("pshard.bench.channel", i);  // one connection per channel
    args.SetMaxReceiveMessageSize(64 << 20);
    channels.push_back(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::WorkerControl::NewStub(channels.back()));
  }
  auto stub_for = [&](int i) { return stubs[i % stubs.size()].get(); };
  auto jobs = v1::JobService::NewStub(channels[0]);
  auto shards = v1::ShardService::NewStub(channels[0]);
  auto cluster = v1::ClusterService::NewStub(channels[0]);

  std::vector<std::unique_ptr<SimState>> sims(n);
  for (int i = 0; i < n; ++i) {
    sims[i] = std::make_unique<SimState>();
    sims[i]->name = absl::StrCat("bench-", i);
  }

  // ---- Register ----
  Gate gate(opt.max_in_flight);
  std::atomic<int> failures{0};
  const absl::Time t_reg = absl::Now();
  for (int i = 0; i < n; ++i) {
    gate.Acquire();
    struct Call {
      grpc::ClientContext ctx;
      v1::RegisterWorkerRequest req;
      v1::RegisterWorkerResponse resp;
      absl::Time start;
    };
    auto* call = new Call;
    call->ctx.set_deadline(Clock::now() + std::chrono::seconds(60));
    call->req.set_name(sims[i]->name);
    call->req.set_incarnation("bench");
    call->req.set_host(absl::StrCat("host-", i / 8));
    call->req.set_device_kind(v1::CPU);
    call->start = absl::Now();
    stub_for(i)->async()->RegisterWorker(
        &call->ctx, &call->req, &call->resp,
        [&, call, i](grpc::Status s) {
          rec.Add("RegisterWorker", absl::Now() - call->start, s.ok());
          if (s.ok()) {
            sims[i]->id = call->resp.worker_id();
          } else {
            ++failures;
          }
          delete call;
          gate.Release();
        });
  }
  if (!gate.Drain(opt.max_in_flight, opt.phase_timeout) || failures > 0) {
    return absl::InternalError(
        absl::StrCat("registration failed for ", failures.load(), " workers"));
  }
  report.register_all_s = absl::ToDoubleSeconds(absl::Now() - t_reg);

  // ---- Heartbeats at 1 Hz, spread over the interval in 100 slots ----
  std::atomic<bool> stop{false};
  std::atomic<int64_t> heartbeats_sent{0};
  std::atomic<int> run_jobs{0};
  std::atomic<int> outstanding{0};
  std::thread heartbeater([&] {
    constexpr int kSlots = 100;
    const absl::Duration slot = opt.heartbeat_interval / kSlots;
    absl::Time next = absl::Now();
    for (int tick = 0; !stop; ++tick) {
      const int s = tick % kSlots;
      for (int i = s; i < n; i += kSlots) {
        SimState* sim = sims[i].get();
        if (sim->in_flight.exchange(true)) continue;  // previous one pending
        struct Call {
          grpc::ClientContext ctx;
          v1::HeartbeatRequest req;
          v1::HeartbeatResponse resp;
          absl::Time start;
        };
        auto* call = new Call;
        call->ctx.set_deadline(Clock::now() + std::chrono::seconds(30));
        call->req.set_worker_id(sim->id);
        call->req.set_incarnation("bench");
        {
          absl::MutexLock lock(&sim->mu);
          call->req.set_state(sim->job_id.empty() ? v1::IDLE : v1::BUSY);
          call->req.set_job_id(sim->job_id);
          call->req.set_epoch(sim->epoch);
        }
        call->start = absl::Now();
        ++heartbeats_sent;
        ++outstanding;
        stub_for(i)->async()->Heartbeat(
            &call->ctx, &call->req, &call->resp,
            [&, call, sim](grpc::Status st) {
              rec.Add("Heartbeat", absl::Now() - call->start, st.ok());
              for (const auto& d : call->resp.directives()) {
                if (d.has_run_job()) {
                  absl::MutexLock lock(&sim->mu);
                  if (sim->job_id != d.run_job().job_id() ||
                      sim->epoch != d.run_job().epoch()) {
                    sim->job_id = d.run_job().job_id();
                    sim->epoch = d.run_job().epoch();
                    sim->rank = d.run_job().rank();
                    ++run_jobs;
                  }
                }
                if (d.has_abort_job()) {
                  absl::MutexLock lock(&sim->mu);
                  sim->job_id.clear();
                  sim->epoch = 0;
                }
              }
              sim->in_flight = false;
              delete call;
              --outstanding;
            });
      }
      next += slot;
      const absl::Time now = absl::Now();
      if (next > now) absl::SleepFor(next - now);
    }
  });

  // ---- Status queries alongside ----
  std::atomic<bool> job_known{false};
  std::string job_id;
  absl::Mutex job_mu;
  std::thread status_client([&] {
    const absl::Duration period = absl::Seconds(1) / std::max(1, opt.status_qps);
    for (int k = 0; !stop; ++k) {
      grpc::ClientContext ctx;
      ctx.set_deadline(Clock::now() + std::chrono::seconds(30));
      const absl::Time start = absl::Now();
      grpc::Status s;
      const char* method = "";
      switch (k % 4) {
        case 0: {
          method = "ListWorkers";
          v1::ListWorkersResponse resp;
          s = cluster->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp);
          break;
        }
        case 1: {
          method = "ListJobs";
          v1::ListJobsResponse resp;
          s = jobs->ListJobs(&ctx, v1::ListJobsRequest(), &resp);
          break;
        }
        default: {
          if (!job_known) {
            method = "ListJobs";
            v1::ListJobsResponse resp;
            s = jobs->ListJobs(&ctx, v1::ListJobsRequest(), &resp);
            break;
          }
          std::string id;
          {
            absl::MutexLock lock(&job_mu);
            id = job_id;
          }
          if (k % 4 == 2) {
            method = "GetJob";
            v1::GetJobRequest req;
            req.set_job_id(id);
            v1::Job resp;
            s = jobs->GetJob(&ctx, req, &resp);
          } else {
            method = "GetShardAssignment";
            v1::GetShardAssignmentRequest req;
            req.set_job_id(id);
            v1::ShardAssignment resp;
            s = shards->GetShardAssignment(&ctx, req, &resp);
            // Not published yet is an answer, not an error.
            if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
              s = grpc::Status::OK;
            }
          }
        }
      }
      rec.Add(method, absl::Now() - start, s.ok());
      absl::SleepFor(period);
    }
  });

  auto finish_threads = [&] {
    stop = true;
    heartbeater.join();
    status_client.join();
    const absl::Time wait_until = absl::Now() + absl::Seconds(30);
    while (outstanding > 0 && absl::Now() < wait_until) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  };

  // ---- Steady phase ----
  const ProcStats before_steady = ReadProc(coordinator->pid());
  const int64_t hb_before = heartbeats_sent;
  const absl::Time t_steady = absl::Now();
  absl::SleepFor(opt.steady);
  const double steady_s = absl::ToDoubleSeconds(absl::Now() - t_steady);
  const ProcStats after_steady = ReadProc(coordinator->pid());
  report.steady_cpu_percent =
      100.0 * (after_steady.cpu_seconds - before_steady.cpu_seconds) / steady_s;
  report.heartbeats_per_second = (heartbeats_sent - hb_before) / steady_s;

  // ---- One job of `world` ranks ----
  const ProcStats before_job = ReadProc(coordinator->pid());
  v1::Job job;
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    v1::JobSpec* spec = req.mutable_spec();
    spec->set_name("bench");
    spec->set_world_size(world);
    spec->mutable_synthetic()->set_num_parameters(int64_t{1} << 30);
    spec->mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
    spec->set_steps(10);
    const absl::Time start = absl::Now();
    grpc::Status s = jobs->SubmitJob(&ctx, req, &job);
    rec.Add("SubmitJob", absl::Now() - start, s.ok());
    if (!s.ok()) {
      finish_threads();
      return FromGrpcStatus(s, "SubmitJob");
    }
    absl::MutexLock lock(&job_mu);
    job_id = job.id();
    job_known = true;
  }
  const absl::Time t_submit = absl::Now();
  while (run_jobs < world && absl::Now() - t_submit < opt.phase_timeout) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (run_jobs < world) {
    finish_threads();
    return absl::DeadlineExceededError(
        absl::StrCat("only ", run_jobs.load(), " of ", world, " ranks got RunJob"));
  }
  report.run_job_delivery_s = absl::ToDoubleSeconds(absl::Now() - t_submit);

  // Ranks by worker.
  std::vector<int> rank_of(n, -1);
  std::vector<int> worker_of(world, -1);
  int64_t epoch = 0;
  for (int i = 0; i < n; ++i) {
    absl::MutexLock lock(&sims[i]->mu);
    if (sims[i]->job_id == job.id()) {
      rank_of[i] = sims[i]->rank;
      worker_of[sims[i]->rank] = i;
      epoch = sims[i]->epoch;
    }
  }

  // Every rank parks in GetAssignment first (the worst case for the server).
  std::atomic<int> assigned{0};
  std::atomic<int> assign_errors{0};
  absl::Mutex t_mu;
  absl::Time first_answer = absl::InfiniteFuture();
  absl::Time last_answer = absl::InfinitePast();
  double imbalance = 0;
  for (int r = 0; r < world; ++r) {
    struct Call {
      grpc::ClientContext ctx;
      v1::GetAssignmentRequest req;
      v1::ShardAssignment resp;
      absl::Time start;
    };
    auto* call = new Call;
    call->ctx.set_deadline(Clock::now() + std::chrono::seconds(300));
    call->req.set_job_id(job.id());
    call->req.set_epoch(epoch);
    *call->req.mutable_timeout() = ToProto(absl::Seconds(290));
    call->start = absl::Now();
    stub_for(worker_of[r])->async()->GetAssignment(
        &call->ctx, &call->req, &call->resp, [&, call](grpc::Status s) {
          const absl::Time now = absl::Now();
          {
            absl::MutexLock lock(&t_mu);
            first_answer = std::min(first_answer, now);
            last_answer = std::max(last_answer, now);
            imbalance = call->resp.imbalance();
          }
          if (!s.ok()) ++assign_errors;
          ++assigned;
          delete call;
        });
  }
  // Layout reports.
  v1::ReportBucketsRequest layout;
  layout.set_job_id(job.id());
  layout.set_epoch(epoch);
  for (int b = 0; b < opt.buckets; ++b) {
    v1::BucketLayout* bucket = layout.add_buckets();
    bucket->set_index(b);
    for (int p = 0; p < opt.parameters_per_bucket; ++p) {
      v1::BucketParameter* param = bucket->add_parameters();
      param->set_name(absl::StrCat("model.layers.", b, ".param", p));
      param->set_num_elements(1000 + 7919 * ((b * 31 + p) % 997));
      param->set_dtype(p % 2 ? "BF16" : "F32");
    }
  }
  absl::Time last_report_sent;
  for (int r = 0; r < world; ++r) {
    gate.Acquire();
    struct Call {
      grpc::ClientContext ctx;
      v1::ReportBucketsRequest req;
      v1::ReportBucketsResponse resp;
      absl::Time start;
    };
    auto* call = new Call;
    call->ctx.set_deadline(Clock::now() + std::chrono::seconds(60));
    call->req = layout;
    call->req.set_rank(r);
    call->req.set_worker_id(sims[worker_of[r]]->id);
    call->start = absl::Now();
    last_report_sent = call->start;
    stub_for(worker_of[r])->async()->ReportBuckets(
        &call->ctx, &call->req, &call->resp, [&, call](grpc::Status s) {
          rec.Add("ReportBuckets", absl::Now() - call->start, s.ok());
          if (!s.ok()) ++failures;
          delete call;
          gate.Release();
        });
  }
  gate.Drain(opt.max_in_flight, opt.phase_timeout);
  const absl::Time wait_assign = absl::Now() + opt.phase_timeout;
  while (assigned < world && absl::Now() < wait_assign) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  {
    absl::MutexLock lock(&t_mu);
    report.assignment_first_ms =
        absl::ToDoubleMilliseconds(first_answer - last_report_sent);
    report.assignment_all_ms =
        absl::ToDoubleMilliseconds(last_answer - last_report_sent);
    report.imbalance = imbalance;
  }
  if (assign_errors > 0 || assigned < world) {
    finish_threads();
    return absl::InternalError(absl::StrCat(
        assign_errors.load(), " GetAssignment errors, ", assigned.load(), " of ",
        world, " answered"));
  }

  // Progress from rank 0, then every rank's result.
  for (int step = 1; step <= 10; ++step) {
    grpc::ClientContext ctx;
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_epoch(epoch);
    req.set_rank(0);
    req.set_worker_id(sims[worker_of[0]]->id);
    req.mutable_progress()->set_step(step);
    v1::ReportProgressResponse resp;
    const absl::Time start = absl::Now();
    grpc::Status s = stub_for(worker_of[0])->ReportProgress(&ctx, req, &resp);
    rec.Add("ReportProgress", absl::Now() - start, s.ok());
  }
  for (int r = 0; r < world; ++r) {
    gate.Acquire();
    struct Call {
      grpc::ClientContext ctx;
      v1::ReportResultRequest req;
      v1::ReportResultResponse resp;
      absl::Time start;
    };
    auto* call = new Call;
    call->ctx.set_deadline(Clock::now() + std::chrono::seconds(60));
    call->req.set_job_id(job.id());
    call->req.set_epoch(epoch);
    call->req.set_rank(r);
    call->req.set_worker_id(sims[worker_of[r]]->id);
    call->req.set_ok(true);
    call->req.set_final_step(10);
    call->start = absl::Now();
    SimState* sim = sims[worker_of[r]].get();
    stub_for(worker_of[r])->async()->ReportResult(
        &call->ctx, &call->req, &call->resp, [&, call, sim](grpc::Status s) {
          rec.Add("ReportResult", absl::Now() - call->start, s.ok());
          {
            absl::MutexLock lock(&sim->mu);
            sim->job_id.clear();
            sim->epoch = 0;
          }
          delete call;
          gate.Release();
        });
  }
  gate.Drain(opt.max_in_flight, opt.phase_timeout);
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(job.id());
    v1::Job out;
    grpc::Status s = jobs->GetJob(&ctx, req, &out);
    report.job_state = s.ok() ? v1::JobState_Name(out.state()) : s.error_message();
  }
  const ProcStats after_job = ReadProc(coordinator->pid());
  report.job_cpu_seconds = after_job.cpu_seconds - before_job.cpu_seconds;

  finish_threads();
  const ProcStats at_end = ReadProc(coordinator->pid());
  report.total_cpu_seconds = at_end.cpu_seconds - at_begin.cpu_seconds;
  report.wall_seconds = absl::ToDoubleSeconds(absl::Now() - t_begin);
  report.rss_mb = at_end.rss_mb;
  report.peak_rss_mb = at_end.hwm_mb;
  report.rpcs = rec.Stats();
  stubs.clear();
  channels.clear();
  RETURN_IF_ERROR(coordinator->Signal(SIGTERM));
  ASSIGN_OR_RETURN(int status, coordinator->Wait(absl::Seconds(30)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat("coordinator exited with wait status ", status));
  }
  return report;
}

}  // namespace bench
}  // namespace pshard
