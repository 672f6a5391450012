// job_probe: follows one pshard job by polling the coordinator's GetJob and
// prints, as one JSON object, every distinct step's progress it saw (rank 0's
// step time, bytes sent, loss, samples/s) with the time it first saw it.
//
// Why polling: a job's progress holds only its latest step, and the event
// log behind WatchJob keeps about one progress event per second, too few for
// a median over a few dozen steps. A GetJob every few milliseconds on
// loopback costs the coordinator little CPU and sees nearly every step once
// steps take more than a few times the interval; the JSON says how many of
// the job's steps were seen, so a reader can tell.
//
// It measures real elapsed time and polls in real time, so it uses
// absl::Now/SleepFor rather than an injected pshard::Clock.
//
//   job_probe --port_file=RUN_DIR/coordinator.port --job=job-1 > progress.json
//
// Once the job runs it also fetches the shard assignment once, so a reader
// can relate rank 0's bytes to the share of the model rank 0 owns.
//
// Exit status: 0 when the job was seen to end (in any state; "state" says
// which), 1 when the coordinator could not be reached or the job was not
// seen to end before --timeout.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/job_state.h"
#include "common/proto_time.h"
#include "grpcpp/grpcpp.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "security/client_token_flags.h"
#include "security/transport.h"
#include "security/transport_flags.h"

ABSL_FLAG(std::string, coordinator, "",
          "the coordinator's host:port (or use --port_file)");
ABSL_FLAG(std::string, port_file, "",
          "a file holding the coordinator's port on 127.0.0.1 (as written by "
          "pshard-coordinator --port_file); waited for until --timeout");
ABSL_FLAG(std::string, job, "job-1", "the job to follow");
ABSL_FLAG(absl::Duration, interval, absl::Milliseconds(5),
          "time between two GetJob calls");
ABSL_FLAG(absl::Duration, timeout, absl::Minutes(10),
          "give up when the job has not ended after this long");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(5),
          "deadline of each GetJob");

namespace pshard::bench {
namespace {

struct Sample {
  int64_t step = 0;
  double step_time_s = 0;
  int64_t bytes_sent = 0;
  double loss = 0;
  double samples_per_second = 0;
  double seen_s = 0;  // since the probe started
};

double Seconds(const google::protobuf::Duration& d) {
  return absl::ToDoubleSeconds(FromProto(d));
}

double Seconds(const google::protobuf::Timestamp& t) {
  return absl::ToDoubleSeconds(FromProto(t) - absl::UnixEpoch());
}

// JSON number, or null for NaN/inf (JSON has neither).
std::string Num(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

// JSON number for a time since the epoch, to the microsecond.
std::string Epoch(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6f", v);
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// The coordinator's address: --coordinator, or 127.0.0.1:<port in
// --port_file>, waiting for the file to appear.
absl::StatusOr<std::string> Address(absl::Time deadline) {
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!coordinator.empty()) return coordinator;
  const std::string path = absl::GetFlag(FLAGS_port_file);
  if (path.empty()) {
    return absl::InvalidArgumentError("one of --coordinator, --port_file is required");
  }
  while (true) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    int port = 0;
    if (in && absl::SimpleAtoi(absl::StripAsciiWhitespace(text.str()), &port) &&
        port > 0 && port < 65536) {
      return absl::StrCat("127.0.0.1:", port);
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no port in ", path, " before the deadline"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

int Main() {
  const absl::Time begin = absl::Now();
  const absl::Time deadline = begin + absl::GetFlag(FLAGS_timeout);
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  const absl::Duration rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  absl::StatusOr<std::string> address = Address(deadline);
  if (!address.ok()) {
    std::fprintf(stderr, "job_probe: %s\n", address.status().ToString().c_str());
    return 1;
  }
  // --tls_* and --token_file as pshardctl takes them (run_benchmarks.py
  // passes the files `pshardctl local` made in its run directory), or
  // --insecure.
  security::TransportSecurity security = security::TransportSecurityFromFlags();
  absl::StatusOr<std::string> token = security::BearerTokenFromFlags();
  if (!token.ok()) {
    std::fprintf(stderr, "job_probe: %s\n", token.status().ToString().c_str());
    return 2;
  }
  security.bearer_token = *std::move(token);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      security::NewChannel(*address, security);
  if (!channel.ok()) {
    std::fprintf(stderr, "job_probe: %s\n", channel.status().ToString().c_str());
    return 2;
  }
  auto stub = v1::JobService::NewStub(*channel);
  auto shard_stub = v1::ShardService::NewStub(*channel);
  bool have_assignment = false;
  v1::ShardAssignment assignment;
  v1::GetJobRequest request;
  request.set_job_id(absl::GetFlag(FLAGS_job));

  std::vector<Sample> samples;
  v1::Job last;
  bool seen = false;
  bool ended = false;
  absl::Status error;
  int64_t polls = 0;
  while (absl::Now() < deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout));
    v1::Job job;
    const grpc::Status status = stub->GetJob(&ctx, request, &job);
    ++polls;
    if (status.ok()) {
      seen = true;
      const v1::JobProgress& p = job.progress();
      if (p.step() > 0 && (samples.empty() || p.step() != samples.back().step)) {
        Sample s;
        s.step = p.step();
        s.step_time_s = Seconds(p.step_time());
        s.bytes_sent = p.bytes_sent();
        s.loss = p.loss();
        s.samples_per_second = p.samples_per_second();
        s.seen_s = absl::ToDoubleSeconds(absl::Now() - begin);
        samples.push_back(s);
      }
      if (!have_assignment && (job.state() == v1::RUNNING || IsTerminal(job.state()))) {
        grpc::ClientContext sctx;
        sctx.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout));
        v1::GetShardAssignmentRequest sreq;
        sreq.set_job_id(request.job_id());
        // Not there yet (ranks still reporting) or gone: try next time.
        have_assignment =
            shard_stub->GetShardAssignment(&sctx, sreq, &assignment).ok();
      }
      last = std::move(job);
      if (IsTerminal(last.state())) {
        ended = true;
        break;
      }
    } else if (status.error_code() != grpc::StatusCode::NOT_FOUND &&
               status.error_code() != grpc::StatusCode::UNAVAILABLE &&
               status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      error = FromGrpcStatus(status, absl::StrCat("GetJob at ", *address));
      break;
    } else if (seen && status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // The cluster went away (pshardctl local stops it right after the
      // job ends): report what was seen.
      error = FromGrpcStatus(status, absl::StrCat("GetJob at ", *address));
      break;
    }
    absl::SleepFor(interval);
  }
  if (!ended && error.ok()) {
    error = absl::DeadlineExceededError(
        absl::StrCat("job ", request.job_id(), " did not end within ",
                     absl::FormatDuration(absl::GetFlag(FLAGS_timeout))));
  }

  std::string out = absl::StrCat(
      "{\"job\": ", Quote(request.job_id()), ", \"coordinator\": ",
      Quote(*address), ", \"state\": ",
      Quote(seen ? v1::JobState_Name(last.state()) : "UNSEEN"),
      ", \"reason\": ", Quote(last.reason()),
      ", \"total_steps\": ", last.spec().steps(),
      ", \"world_size\": ", last.spec().world_size(),
      ", \"start_time_s\": ",
      last.has_start_time() ? Epoch(Seconds(last.start_time())) : "null",
      ", \"end_time_s\": ",
      last.has_end_time() ? Epoch(Seconds(last.end_time())) : "null",
      ", \"polls\": ", polls,
 ", \"error\": ",
      Quote(error.ok() ? "" : error.ToString()),
      ",\n \"columns\": [\"step\", \"step_time_s\", \"bytes_sent\", \"loss\", "
      "\"samples_per_second\", \"seen_s\"],\n \"samples\": [");
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    absl::StrAppend(&out, i == 0 ? "\n  " : ",\n  ", "[", s.step, ", ",
                    Num(s.step_time_s), ", ", s.bytes_sent, ", ", Num(s.loss),
                    ", ", Num(s.samples_per_second), ", ", Num(s.seen_s), "]");
  }
  absl::StrAppend(&out, "]");
  if (have_assignment) {
    std::vector<int64_t> owned(last.spec().world_size(), 0);
    for (const v1::RankShard& r : assignment.ranks()) {
      if (r.rank() >= 0 && r.rank() < static_cast<int>(owned.size())) {
        owned[r.rank()] = r.owned_bytes();
      }
    }
    absl::StrAppend(&out, ",\n \"assignment\": {\"buckets\": ",
                    assignment.buckets_size(), ", \"imbalance\": ",
                    Num(assignment.imbalance()), ", \"total_bytes\": ",
                    assignment.total_bytes(), ", \"owned_bytes\": [",
                    absl::StrJoin(owned, ", "), "]}");
  }
  absl::StrAppend(&out, "}\n");
  std::fputs(out.c_str(), stdout);
  if (!ended) {
    std::fprintf(stderr, "job_probe: %s\n", error.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace pshard::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "job_probe --port_file=RUN_DIR/coordinator.port [--job=job-1]: prints "
      "every step's progress of one job as JSON");
  absl::ParseCommandLine(argc, argv);
  return pshard::bench::Main();
}
