#include "bench/coordinator/coordinator_bench.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>  // std::remove
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/coordinator/bench_tools.h"
#include "common/grpc_status.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "tests/testing/coordinator.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/subprocess.h"
#include "worker/runtime/assignment_client.h"
#include "security/access_policy.h"
#include "security/certificate_directory.h"
#include "security/server_access_flags.h"
#include "security/tokens.h"
#include "security/transport.h"
#include "security/transport_flags.h"

namespace pshard {
namespace bench {
namespace {

// Timing here is the benchmark's measurement of real elapsed time (latencies,
// phases, pacing), so it reads absl::Now()/absl::SleepFor() directly rather
// than an injected pshard::Clock; gRPC deadlines are on gRPC's own clock.
using GrpcClock = std::chrono::system_clock;

// The token file (security/tokens.h's format, tokens given as digests, as
// pshardctl local writes it) with one token per simulated worker, role
// worker, named as the worker registers, and `admin` for the bench's own
// calls; each SimState gets its "Bearer" value. Returns the file's path.
absl::StatusOr<std::string> WriteTokens(
    const BenchOptions& opt, std::vector<std::unique_ptr<SimState>>& sims,
    const std::string& admin_name, std::string* admin_authorization) {
  std::string text = "# token name roles\n";
  for (const std::unique_ptr<SimState>& sim : sims) {
    ASSIGN_OR_RETURN(const std::string token, security::NewToken());
    sim->authorization = "Bearer " + token;
    absl::StrAppend(&text, security::TokenDigest(token), " ", sim->name,
                    " worker\n");
  }
  ASSIGN_OR_RETURN(const std::string admin, security::NewToken());
  *admin_authorization = "Bearer " + admin;
  absl::StrAppend(&text, security::TokenDigest(admin), " ", admin_name,
                  " admin,submit\n");
  if (opt.swap_two_tokens && sims.size() >= 2) {
    std::swap(sims[0]->authorization, sims[1]->authorization);
  }
  const std::string path = opt.work_dir + "/bench-tokens";
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return path;
}

// The full-mesh rendezvous of BenchOptions::rendezvous, every call
// asynchronous. kGetEach: every rank puts its record, then (under `gate`)
// reads its peers' one KvGet at a time. kGetMany, the worst case for the
// coordinator's memory: every rank but the last puts its record, every rank
// parks one KvGetMany for all its peers' records (no gate, as real ranks
// do), then the last rank's put answers them all at once.
struct MeshRendezvous {
  using StubFor = std::function<v1::WorkerControl::Stub*(int)>;

  const BenchOptions& opt;
  const std::string job_id;
  const int64_t epoch;
  const int world;
  const std::vector<int>& worker_of;
  const std::vector<std::unique_ptr<SimState>>& sims;
  StubFor stub_for;
  Recorder& rec;
  Denials& denials;
  Gate& gate;
  std::atomic<int> failures{0};
  std::atomic<int64_t> bytes_read{0};
  std::atomic<int64_t> cut_answers{0};
  // Ranks whose KvGetMany reads are not all answered.
  absl::Mutex mu;
  int reads_left ABSL_GUARDED_BY(mu) = 0;
  std::string first_error ABSL_GUARDED_BY(mu);

  static std::string Key(int rank) { return absl::StrCat("mesh/", rank); }
  size_t RecordBytes() const { return 128 + 2 * (world - 1); }

  absl::Status Run(BenchReport& report) {
    const bool each = opt.rendezvous == BenchOptions::Rendezvous::kGetEach;
    for (int r = 0; r < (each ? world : world - 1); ++r) Put(r);
    if (!gate.Drain(opt.max_in_flight, opt.phase_timeout)) {
      return absl::DeadlineExceededError("rendezvous puts did not finish");
    }
    for (int r = 0; r < world; ++r) {
      if (each) {
        for (int peer = 0; peer < world; ++peer) {
          if (peer != r) GetOne(r, peer);
        }
      } else {
        std::vector<std::string> keys;
        for (int peer = 0; peer < world; ++peer) {
          if (peer != r) keys.push_back(Key(peer));
        }
        {
          absl::MutexLock lock(&mu);
          ++reads_left;
        }
        GetMany(r, std::move(keys));
      }
    }
    if (!each) Put(world - 1);
    if (!gate.Drain(opt.max_in_flight, opt.phase_timeout)) {
      return absl::DeadlineExceededError("rendezvous reads did not finish");
    }
    {
      absl::MutexLock lock(&mu);
      if (!mu.AwaitWithTimeout(
              absl::Condition(+[](int* left) { return *left == 0; },
                              &reads_left),
              opt.phase_timeout)) {
        return absl::DeadlineExceededError("KvGetMany reads did not finish");
      }
    }
    const int64_t expected =
        int64_t{world} * (world - 1) * static_cast<int64_t>(RecordBytes());
    if (failures > 0 || bytes_read != expected) {
      absl::MutexLock lock(&mu);
      return absl::InternalError(absl::StrCat(
          "rendezvous: ", failures.load(), " calls failed (first: ",
          first_error, "); read ", bytes_read.load(), " bytes of ", expected));
    }
    report.rendezvous_bytes_read = bytes_read;
    report.rendezvous_cut_answers = cut_answers;
    return absl::OkStatus();
  }

  template <typename Call>
  Call* Start(int rank) {
    auto* call = new Call;
    call->ctx.set_deadline(GrpcClock::now() + std::chrono::seconds(60));
    AddAuthorization(&call->ctx, sims[worker_of[rank]]->authorization);
    call->req.set_job_id(job_id);
    call->req.set_epoch(epoch);
    call->start = absl::Now();
    return call;
  }

  void Finish(const char* method, absl::Time start, const grpc::Status& s) {
    rec.Add(method, absl::Now() - start, s.ok());
    denials.Note(method, s);
    if (!s.ok()) Fail(absl::StrCat(method, ": ", s.error_message()));
  }

  void Fail(std::string error) {
    ++failures;
    absl::MutexLock lock(&mu);
    if (first_error.empty()) first_error = std::move(error);
  }

  void Put(int rank) {
    gate.Acquire();
    using Call = AsyncCall<v1::KvPutRequest, v1::KvPutResponse>;
    Call* call = Start<Call>(rank);
    call->req.set_key(Key(rank));
    call->req.set_value(std::string(RecordBytes(), 'r'));
    stub_for(worker_of[rank])->async()->KvPut(
        &call->ctx, &call->req, &call->resp, [this, call](grpc::Status s) {
          Finish("KvPut", call->start, s);
          delete call;
          gate.Release();
        });
  }

  void GetOne(int rank, int peer) {
    gate.Acquire();
    using Call = AsyncCall<v1::KvGetRequest, v1::KvGetResponse>;
    Call* call = Start<Call>(rank);
    call->req.set_key(Key(peer));
    *call->req.mutable_timeout() = ToProto(absl::Seconds(30));
    stub_for(worker_of[rank])->async()->KvGet(
        &call->ctx, &call->req, &call->resp, [this, call](grpc::Status s) {
          Finish("KvGet", call->start, s);
          if (s.ok()) bytes_read += call->resp.value().size();
          delete call;
          gate.Release();
        });
  }

  // Reads every key of `keys`, asking again for the rest when an answer is
  // cut; then counts the rank's reads done.
  void GetMany(int rank, std::vector<std::string> keys) {
    using Call = AsyncCall<v1::KvGetManyRequest, v1::KvGetManyResponse>;
    Call* call = Start<Call>(rank);
    for (const std::string& key : keys) call->req.add_keys(key);
    *call->req.mutable_timeout() = ToProto(absl::Seconds(30));
    stub_for(worker_of[rank])->async()->KvGetMany(
        &call->ctx, &call->req, &call->resp,
        [this, call, rank, keys = std::move(keys)](grpc::Status s) mutable {
          Finish("KvGetMany", call->start, s);
          const size_t got = s.ok() ? call->resp.values_size() : 0;
          for (const std::string& value : call->resp.values()) {
            bytes_read += value.size();
          }
          delete call;
          if (s.ok() && (got == 0 || got > keys.size())) {
            Fail(absl::StrCat("KvGetMany answered ", got, " values to ",
                              keys.size(), " keys"));
          }
          if (s.ok() && got > 0 && got < keys.size()) {
            ++cut_answers;
            keys.erase(keys.begin(), keys.begin() + got);
            GetMany(rank, std::move(keys));
            return;
          }
          absl::MutexLock lock(&mu);
          --reads_left;
        });
  }
};

absl::StatusOr<BenchReport> RunPhases(const BenchOptions& opt,
                                      Denials* denials) {
  const int n = opt.workers;
  const int world = opt.world_size > 0 ? opt.world_size : n;
  if (n < 1 || world > n) {
    return absl::InvalidArgumentError("need 1 <= world_size <= workers");
  }
  BenchReport report;
  Recorder rec;
  const std::string state = opt.work_dir + "/bench-state.db";
  for (const std::string& p :
       {state, state + "-wal", state + "-shm", state + ".lock"}) {
    std::remove(p.c_str());
  }
  testing::CoordinatorOptions coordinator_options;
  coordinator_options.dir = opt.work_dir;
  coordinator_options.state_path = state;
  coordinator_options.heartbeat_interval = opt.heartbeat_interval;
  coordinator_options.worker_timeout = opt.worker_timeout;
  coordinator_options.extra_flags = {"--state_sync=" + opt.state_sync};
  const std::string metrics_port_file = opt.work_dir + "/bench-metrics.port";
  std::remove(metrics_port_file.c_str());
  if (opt.scrape_interval > absl::ZeroDuration()) {
    coordinator_options.extra_flags.push_back("--metrics_listen=127.0.0.1:0");
    coordinator_options.extra_flags.push_back("--metrics_port_file=" +
                                              metrics_port_file);
  }
  security::TransportSecurity client_security = security::Plaintext();
  if (opt.tls) {
    ASSIGN_OR_RETURN(security::CertificateDirectory certificates,
                     security::CertificateDirectory::Create(
                         opt.work_dir + "/tls", "pshard bench CA", absl::Now(),
                         absl::Hours(1)));
    ASSIGN_OR_RETURN(security::TransportSecurity server,
                     certificates.Issue("pshard-coordinator"));
    server.require_client_certificate = true;
    coordinator_options.security_flags = security::TransportSecurityFlags(server);
    // One certificate for every simulated worker: the handshakes, not the
    // identities, are what costs.
    ASSIGN_OR_RETURN(client_security, certificates.Issue("bench-workers"));
  }
  std::vector<std::unique_ptr<SimState>> sims(n);
  for (int i = 0; i < n; ++i) {
    sims[i] = std::make_unique<SimState>();
    sims[i]->name = absl::StrCat("bench-", i);
  }
  // The bench's own JobService/ClusterService calls (status client,
  // SubmitJob, GetJob): "" with tokens off.
  std::string admin_authorization;
  if (opt.tokens) {
    security::AccessSettings access;
    ASSIGN_OR_RETURN(access.tokens_file,
                     WriteTokens(opt, sims, "bench-admin", &admin_authorization));
    for (std::string& flag : security::AccessFlags(access)) {
      coordinator_options.extra_flags.push_back(std::move(flag));
    }
    report.tokens = n + 1;
  }
  ASSIGN_OR_RETURN(testing::RunningCoordinator running,
                   testing::StartCoordinator(coordinator_options));
  testing::Subprocess* coordinator = running.process.get();
  const absl::Time t_begin = absl::Now();
  const ProcStats at_begin = ReadProc(coordinator->pid());
  const std::string address = running.address();

  std::vector<std::unique_ptr<v1::WorkerControl::Stub>> stubs;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic;
  for (int i = 0; i < std::max(1, opt.channels); ++i) {
    grpc::ChannelArguments args;
    args.SetInt("pshard.bench.channel", i);  // one connection per channel
    args.SetMaxReceiveMessageSize(64 << 20);
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                     security::NewChannel(address, client_security, args));
    channels.push_back(std::move(channel));
    stubs.push_back(v1::WorkerControl::NewStub(channels.back()));
    generic.push_back(std::make_unique<grpc::GenericStub>(channels.back()));
  }
  auto generic_for = [&](int i) { return generic[i % generic.size()].get(); };
  auto stub_for = [&](int i) { return stubs[i % stubs.size()].get(); };
  auto jobs = v1::JobService::NewStub(channels[0]);
  auto shards = v1::ShardService::NewStub(channels[0]);
  auto cluster = v1::ClusterService::NewStub(channels[0]);

  // ---- Register ----
  Gate gate(opt.max_in_flight);
  std::atomic<int> failures{0};
  const absl::Time t_reg = absl::Now();
  for (int i = 0; i < n; ++i) {
    gate.Acquire();
    using Call = AsyncCall<v1::RegisterWorkerRequest, v1::RegisterWorkerResponse>;
    auto* call = new Call;
    call->ctx.set_deadline(GrpcClock::now() + std::chrono::seconds(60));
    AddAuthorization(&call->ctx, sims[i]->authorization);
    call->req.set_name(sims[i]->name);
    call->req.set_incarnation("bench");
    call->req.set_host(absl::StrCat("host-", i / 8));
    call->req.set_device_kind(v1::CPU);
    call->start = absl::Now();
    stub_for(i)->async()->RegisterWorker(
        &call->ctx, &call->req, &call->resp,
        [&, call, i](grpc::Status s) {
          rec.Add("RegisterWorker", absl::Now() - call->start, s.ok());
          denials->Note("RegisterWorker", s);
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
  std::atomic<int> scan_errors{0};
  std::thread heartbeater([&] {
    constexpr int kSlots = 100;
    const absl::Duration slot = opt.heartbeat_interval / kSlots;
    absl::Time next = absl::Now();
    for (int tick = 0; !stop; ++tick) {
      const int s = tick % kSlots;
      for (int i = s; i < n; i += kSlots) {
        SimState* sim = sims[i].get();
        if (sim->in_flight.exchange(true)) continue;  // previous one pending
        using Call = AsyncCall<grpc::ByteBuffer, grpc::ByteBuffer>;
        auto* call = new Call;
        call->ctx.set_deadline(GrpcClock::now() + std::chrono::seconds(30));
        AddAuthorization(&call->ctx, sim->authorization);
        v1::HeartbeatRequest req;
        req.set_worker_id(sim->id);
        req.set_incarnation("bench");
        {
          absl::MutexLock lock(&sim->mu);
          req.set_state(sim->job_id.empty() ? v1::IDLE : v1::BUSY);
          req.set_job_id(sim->job_id);
          req.set_epoch(sim->epoch);
        }
        call->req = ToBuffer(req);
        call->start = absl::Now();
        ++heartbeats_sent;
        ++outstanding;
        generic_for(i)->UnaryCall(
            &call->ctx, "/pshard.v1.WorkerControl/Heartbeat", grpc::StubOptions(),
            &call->req, &call->resp, [&, call, sim](grpc::Status st) {
              rec.Add("Heartbeat", absl::Now() - call->start, st.ok());
              denials->Note("Heartbeat", st);
              std::vector<DirectiveHead> directives;
              if (st.ok() &&
                  !ScanHeartbeatResponse(BufferToString(call->resp), &directives)) {
                ++scan_errors;
              }
              for (const DirectiveHead& d : directives) {
                absl::MutexLock lock(&sim->mu);
                if (d.run_job) {
                  if (sim->job_id != d.job_id || sim->epoch != d.epoch) {
                    sim->job_id = d.job_id;
                    sim->epoch = d.epoch;
                    sim->rank = d.rank;
                    ++run_jobs;
                  }
                } else {
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
      ctx.set_deadline(GrpcClock::now() + std::chrono::seconds(30));
      AddAuthorization(&ctx, admin_authorization);
      const absl::Time start = absl::Now();
      grpc::Status s;
      const char* method = "";
      switch (k % 4) {
        case 0: {
          // One page, as a paging client asks for the first one.
          method = "ListWorkers";
          v1::ListWorkersRequest req;
          req.set_page_size(opt.list_page_size);
          v1::ListWorkersResponse resp;
          s = cluster->ListWorkers(&ctx, req, &resp);
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
      denials->Note(method, s);
      absl::SleepFor(period);
    }
  });

  // ---- Prometheus scrapes alongside (--scrape_interval) ----
  std::thread scraper;
  if (opt.scrape_interval > absl::ZeroDuration()) {
    ASSIGN_OR_RETURN(const int metrics_port,
                     testing::WaitForPortFile(metrics_port_file, absl::Seconds(30)));
    scraper = std::thread([&, metrics_port] {
      while (!stop) {
        const absl::Time start = absl::Now();
        const absl::StatusOr<std::string> text = testing::ScrapeMetrics(metrics_port);
        rec.Add("Scrape", absl::Now() - start, text.ok());
        absl::SleepFor(opt.scrape_interval);
      }
    });
  }

  auto finish_threads = [&] {
    stop = true;
    heartbeater.join();
    status_client.join();
    if (scraper.joinable()) scraper.join();
    const absl::Time wait_until = absl::Now() + absl::Seconds(30);
    while (outstanding > 0 && absl::Now() < wait_until) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  };

  // ---- Steady phase ----
  rec.SetPhase("steady");
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
  rec.SetPhase("job");
  const ProcStats before_job = ReadProc(coordinator->pid());
  // Wall time and coordinator CPU of each step of the job phase.
  std::string step_name;
  absl::Time step_start;
  double step_cpu = 0;
  double step_own_cpu = 0;
  auto step = [&](const std::string& name) {
    const absl::Time now = absl::Now();
    const double cpu = ReadProc(coordinator->pid()).cpu_seconds;
    const double own_cpu = ReadProc(getpid()).cpu_seconds;
    if (!step_name.empty()) {
      report.steps.push_back({step_name, absl::ToDoubleMilliseconds(now - step_start),
                              1000 * (cpu - step_cpu),
                              1000 * (own_cpu - step_own_cpu)});
    }
    step_name = name;
    step_start = now;
    step_cpu = cpu;
    step_own_cpu = own_cpu;
    // Steps 1-3 are the job's start: submit -> every rank has the
    // assignment.
    if (!name.empty()) rec.SetStep(name, name == "4_results" ? "end" : "start");
  };
  step("1_run_job");
  v1::Job job;
  {
    grpc::ClientContext ctx;
    AddAuthorization(&ctx, admin_authorization);
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
    denials->Note("SubmitJob", s);
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
    grpc::ClientContext ctx;
    AddAuthorization(&ctx, admin_authorization);
    v1::GetJobRequest req;
    req.set_job_id(job.id());
    v1::Job out;
    grpc::Status s = jobs->GetJob(&ctx, req, &out);
    denials->Note("GetJob", s);
    return absl::DeadlineExceededError(absl::StrCat(
        "only ", run_jobs.load(), " of ", world, " ranks got RunJob; job ",
        s.ok() ? absl::StrCat(v1::JobState_Name(out.state()), ": ", out.reason())
               : s.error_message()));
  }
  report.run_job_delivery_s = absl::ToDoubleSeconds(absl::Now() - t_submit);

  // Ranks by worker.
  std::vector<int> rank_of(n, -1);
  auto all_ranks_known = [&](const std::vector<int>& w) {
    return std::find(w.begin(), w.end(), -1) == w.end();
  };
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
  if (!all_ranks_known(worker_of)) {
    finish_threads();
    return absl::InternalError("some rank has no worker");
  }
  if (opt.rendezvous != BenchOptions::Rendezvous::kNone) {
    step("1b_rendezvous");
    MeshRendezvous mesh{opt,       job.id(), epoch,     world,
                        worker_of, sims,     stub_for,  rec,
                        *denials,  gate};
    if (absl::Status s = mesh.Run(report); !s.ok()) {
      finish_threads();
      return s;
    }
  }
  step("2_layouts");

  // Every rank parks in GetAssignment first (the worst case for the server).
  std::atomic<int> assigned{0};
  std::atomic<int> assign_errors{0};
  absl::Mutex t_mu;
  absl::Time first_answer = absl::InfiniteFuture();
  absl::Time last_answer = absl::InfinitePast();
  double imbalance = 0;
  int64_t assignment_bytes = 0;
  // The requests and the decoding are pshard-worker's (AssignmentClient's
  // builders); the calls are the bench's own, asynchronous, so that one
  // thread keeps `world` ranks' calls in flight.
  worker::AssignmentClientOptions as_worker;
  as_worker.job_id = job.id();
  as_worker.epoch = epoch;
  as_worker.world_size = world;
  for (int r = 0; r < world; ++r) {
    using Call = AsyncCall<grpc::ByteBuffer, grpc::ByteBuffer>;
    auto* call = new Call;
    call->ctx.set_deadline(GrpcClock::now() + std::chrono::seconds(300));
    AddAuthorization(&call->ctx, sims[worker_of[r]]->authorization);
    call->req = ToBuffer(worker::AssignmentRequest(as_worker, absl::Seconds(290)));
    // Only rank 0's answer is parsed and decoded (for the imbalance); the
    // others are counted, to keep the load generator light.
    const bool parse = r == 0;
    generic_for(worker_of[r])->UnaryCall(
        &call->ctx, "/pshard.v1.WorkerControl/GetAssignment",
        grpc::StubOptions(), &call->req, &call->resp,
        [&, call, parse](grpc::Status s) {
          const absl::Time now = absl::Now();
          denials->Note("GetAssignment", s);
          v1::ShardAssignment a;
          const std::string bytes = parse ? BufferToString(call->resp) : "";
          if (s.ok() && parse &&
              (!a.ParseFromString(bytes) ||
               !worker::DecodeAssignment(a, as_worker, opt.buckets).ok())) {
            ++assign_errors;
          }
          {
            absl::MutexLock lock(&t_mu);
            first_answer = std::min(first_answer, now);
            last_answer = std::max(last_answer, now);
            if (parse) {
              imbalance = a.imbalance();
              assignment_bytes = static_cast<int64_t>(bytes.size());
            }
          }
          if (!s.ok()) ++assign_errors;
          ++assigned;
          delete call;
        });
  }
  // Layout reports.
  std::vector<v1::BucketLayout> buckets(opt.buckets);
  for (int b = 0; b < opt.buckets; ++b) {
    v1::BucketLayout* bucket = &buckets[b];
    bucket->set_index(b);
    for (int p = 0; p < opt.parameters_per_bucket; ++p) {
      v1::BucketParameter* param = bucket->add_parameters();
      param->set_name(absl::StrCat("model.layers.", b, ".param", p));
      param->set_num_elements(1000 + 7919 * ((b * 31 + p) % 997));
      param->set_dtype(p % 2 ? "BF16" : "F32");
    }
  }
  // As pshard-worker reports (AssignmentClient's builders): rank 0 sends the
  // layout, the other ranks its fingerprint (waiting at the coordinator for
  // rank 0's report if they come first). The layout and the fingerprint
  // report are built once; the layout is serialized once and sent by
  // reference after a small head (protobuf parses fields in any order).
  const v1::ReportBucketsRequest layout =
      worker::LayoutReport(as_worker, std::move(buckets));
  const v1::ReportBucketsRequest by_fingerprint =
      worker::FingerprintReport(layout, absl::Seconds(30));
  const grpc::Slice shared_buckets(layout.SerializeAsString());
  report.layout_bytes = static_cast<int64_t>(layout.ByteSizeLong());
  report.fingerprint_report_bytes = [&] {
    v1::ReportBucketsRequest head = by_fingerprint;
    head.set_rank(world - 1);
    head.set_worker_id(sims[worker_of[world - 1]]->id);
    return static_cast<int64_t>(head.ByteSizeLong());
  }();
  absl::Time last_report_sent;
  absl::Time last_report_answered = absl::InfinitePast();
  for (int r = 0; r < world; ++r) {
    // The last report goes alone, after all others were answered, so that
    // "last report -> assignment" measures the coordinator, not queueing.
    if (r == world - 1) {
      gate.Drain(opt.max_in_flight, opt.phase_timeout);
      step("3_assignment");
    }
    gate.Acquire();
    using Call = AsyncCall<grpc::ByteBuffer, grpc::ByteBuffer>;
    auto* call = new Call;
    call->ctx.set_deadline(GrpcClock::now() + std::chrono::seconds(60));
    AddAuthorization(&call->ctx, sims[worker_of[r]]->authorization);
    if (worker::SendsLayoutFirst(r)) {
      v1::ReportBucketsRequest head;
      head.set_rank(r);
      head.set_worker_id(sims[worker_of[r]]->id);
      grpc::Slice slices[2] = {grpc::Slice(head.SerializeAsString()),
                               shared_buckets};
      call->req = grpc::ByteBuffer(slices, 2);
    } else {
      v1::ReportBucketsRequest head = by_fingerprint;
      head.set_rank(r);
      head.set_worker_id(sims[worker_of[r]]->id);
      call->req = ToBuffer(head);
    }
    call->start = absl::Now();
    last_report_sent = call->start;
    generic_for(worker_of[r])->UnaryCall(
        &call->ctx, "/pshard.v1.WorkerControl/ReportBuckets",
        grpc::StubOptions(), &call->req, &call->resp,
        [&, call](grpc::Status s) {
          const absl::Time now = absl::Now();
          rec.Add("ReportBuckets", now - call->start, s.ok());
          denials->Note("ReportBuckets", s);
          v1::ReportBucketsResponse resp;
          // send_layout never happens here: every rank has rank 0's layout.
          if (!s.ok() || !resp.ParseFromString(BufferToString(call->resp)) ||
              resp.send_layout()) {
            ++failures;
          }
          {
            absl::MutexLock lock(&t_mu);
            last_report_answered = std::max(last_report_answered, now);
          }
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
    report.last_report_ms =
        absl::ToDoubleMilliseconds(last_report_answered - last_report_sent);
    report.assignment_first_ms =
        absl::ToDoubleMilliseconds(first_answer - last_report_sent);
    report.assignment_all_ms =
        absl::ToDoubleMilliseconds(last_answer - last_report_sent);
    report.imbalance = imbalance;
    report.assignment_bytes = assignment_bytes;
  }
  if (assign_errors > 0 || assigned < world) {
    finish_threads();
    return absl::InternalError(absl::StrCat(
        assign_errors.load(), " GetAssignment errors, ", assigned.load(), " of ",
        world, " answered"));
  }

  // Progress from rank 0, then every rank's result.
  step("4_results");
  for (int step = 1; step <= 10; ++step) {
    grpc::ClientContext ctx;
    AddAuthorization(&ctx, sims[worker_of[0]]->authorization);
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
    denials->Note("ReportProgress", s);
  }
  for (int r = 0; r < world; ++r) {
    gate.Acquire();
    using Call = AsyncCall<v1::ReportResultRequest, v1::ReportResultResponse>;
    auto* call = new Call;
    call->ctx.set_deadline(GrpcClock::now() + std::chrono::seconds(60));
    AddAuthorization(&call->ctx, sims[worker_of[r]]->authorization);
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
          denials->Note("ReportResult", s);
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
    AddAuthorization(&ctx, admin_authorization);
    v1::GetJobRequest req;
    req.set_job_id(job.id());
    v1::Job out;
    grpc::Status s = jobs->GetJob(&ctx, req, &out);
    denials->Note("GetJob", s);
    report.job_state = s.ok() ? v1::JobState_Name(out.state()) : s.error_message();
  }
  step("");
  const ProcStats after_job = ReadProc(coordinator->pid());
  rec.SetPhase("end");
  report.job_cpu_seconds = after_job.cpu_seconds - before_job.cpu_seconds;

  finish_threads();
  const ProcStats at_end = ReadProc(coordinator->pid());
  report.total_cpu_seconds = at_end.cpu_seconds - at_begin.cpu_seconds;
  report.wall_seconds = absl::ToDoubleSeconds(absl::Now() - t_begin);
  report.rss_mb = at_end.rss_mb;
  report.peak_rss_mb = at_end.hwm_mb;
  if (scan_errors > 0) {
    return absl::InternalError(
        absl::StrCat(scan_errors.load(), " heartbeat replies did not parse"));
  }
  report.rpcs = rec.Stats("");
  for (const char* phase :
       {"register", "steady", "job", "job/start", "job/1_run_job",
        "job/2_layouts", "job/3_assignment", "job/4_results"}) {
    report.rpcs_by_phase[phase] = rec.Stats(phase);
  }
  if (opt.rendezvous != BenchOptions::Rendezvous::kNone) {
    report.rpcs_by_phase["job/1b_rendezvous"] = rec.Stats("job/1b_rendezvous");
  }
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

}  // namespace

absl::StatusOr<BenchReport> RunCoordinatorBenchmark(const BenchOptions& opt) {
  Denials denials;
  absl::StatusOr<BenchReport> report = RunPhases(opt, &denials);
  // A refusal fails the run even where the phases went on (a refused
  // heartbeat is only an error count in the latency table).
  if (denials.count() > 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        denials.count(), " calls refused by the coordinator's access control: ",
        denials.Summary(),
        report.ok() ? "" : absl::StrCat("; the run: ", report.status().ToString())));
  }
  if (report.ok()) report->refused_calls = denials.count();
  return report;
}

}  // namespace bench
}  // namespace pshard
