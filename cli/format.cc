#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/proto_time.h"
#include "google/protobuf/util/json_util.h"

namespace pshard::cli {
namespace {

// "3m ago" style age of `t`, or "-" when unset.
std::string Age(const google::protobuf::Timestamp& ts, absl::Time now) {
  if (ts.seconds() == 0 && ts.nanos() == 0) return "-";
  absl::Duration age = now - FromProto(ts);
  if (age < absl::Seconds(1)) return "just now";
  return absl::StrCat(HumanDuration(absl::Trunc(age, absl::Seconds(1))),
                      " ago");
}

std::string Timestamp(const google::protobuf::Timestamp& ts, absl::Time now) {
  if (ts.seconds() == 0 && ts.nanos() == 0) return "-";
  return absl::StrCat(
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", FromProto(ts),
                       absl::UTCTimeZone()),
      " (", Age(ts, now), ")");
}

// As the coordinator's events say it: "initialised from PATH (step s)".
std::string InitializedFromText(const v1::ResumePoint& point) {
  return absl::StrCat("initialised from ", point.path(), " (step ",
                      point.step(), ")");
}

std::string StepCell(const v1::JobProgress& p) {
  if (p.total_steps() <= 0) return absl::StrCat(p.step());
  return absl::StrCat(p.step(), "/", p.total_steps());
}

// The figures after the step count, shared by the line and the bar.
std::string ProgressFigures(const v1::JobProgress& p) {
  std::vector<std::string> parts;
  // Workloads without a loss report NaN or leave the field at 0.
  if (std::isfinite(p.loss()) && p.loss() != 0 && p.step() > 0) {
    parts.push_back(absl::StrFormat("loss %.6g", p.loss()));
  }
  if (p.lr() > 0 && p.step() > 0) {
    parts.push_back(absl::StrFormat("lr %.4g", p.lr()));
  }
  if (p.has_grad_norm() && p.step() > 0) {
    parts.push_back(absl::StrFormat("grad_norm %.4g", p.grad_norm()));
  }
  if (p.has_step_time()) {
    parts.push_back(absl::StrCat(HumanDuration(FromProto(p.step_time())),
                                 "/step"));
  }
  if (p.samples_per_second() > 0) {
    parts.push_back(
        absl::StrFormat("%.0f samples/s", p.samples_per_second()));
  }
  return absl::StrJoin(parts, "  ");
}

int Percent(const v1::JobProgress& p) {
  if (p.total_steps() <= 0) return 0;
  int64_t step = std::clamp<int64_t>(p.step(), 0, p.total_steps());
  return static_cast<int>(step * 100 / p.total_steps());
}

}  // namespace

std::string JobWorkload(const v1::JobSpec& spec) {
  switch (spec.workload_case()) {
    case v1::JobSpec::kMlp:
      return "mlp";
    case v1::JobSpec::kSynthetic:
      return "synthetic";
    case v1::JobSpec::kReplay:
      return "replay";
    case v1::JobSpec::kProgram:
      return spec.program().argv_size() == 0
                 ? "program"
                 : absl::StrCat("program ", spec.program().argv(0));
    default:
      return "-";
  }
}

Table::Table(std::vector<std::string> header, std::vector<bool> numeric)
    : header_(std::move(header)), numeric_(std::move(numeric)) {
  numeric_.resize(header_.size(), false);
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(header_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::string out;
  auto render_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      const size_t pad = width[c] - row[c].size();
      if (numeric_[c]) line.append(pad, ' ');
      line += row[c];
      if (!numeric_[c]) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  render_row(header_);
  for (const auto& row : rows_) render_row(row);
  return out;
}

std::string HumanBytes(int64_t bytes) {
  if (bytes < 0) return absl::StrCat("-", HumanBytes(-bytes));
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string HumanDuration(absl::Duration d) {
  if (d < absl::ZeroDuration()) return absl::StrCat("-", HumanDuration(-d));
  if (d < absl::Microseconds(1)) {
    return absl::StrCat(absl::ToInt64Nanoseconds(d), "ns");
  }
  if (d < absl::Milliseconds(1)) {
    return absl::StrFormat("%.1fus", absl::ToDoubleMicroseconds(d));
  }
  if (d < absl::Seconds(1)) {
    return absl::StrFormat("%.1fms", absl::ToDoubleMilliseconds(d));
  }
  if (d < absl::Minutes(1)) {
    return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d));
  }
  const int64_t secs = absl::ToInt64Seconds(d);
  if (secs < 3600) return absl::StrCat(secs / 60, "m", secs % 60, "s");
  if (secs < 86400) return absl::StrCat(secs / 3600, "h", (secs % 3600) / 60, "m");
  return absl::StrCat(secs / 86400, "d", (secs % 86400) / 3600, "h");
}

std::string JobStateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

std::string CheckpointStateName(v1::CheckpointRecord::State state) {
  std::string name = v1::CheckpointRecord::State_Name(state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

std::string WorkerStateName(v1::WorkerState state) {
  std::string name = v1::WorkerState_Name(state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

std::string PolicyName(v1::JobSpec::AssignmentPolicy policy) {
  return absl::AsciiStrToLower(v1::JobSpec::AssignmentPolicy_Name(policy));
}

absl::StatusOr<v1::JobState> ParseJobState(absl::string_view name) {
  v1::JobState state;
  if (v1::JobState_Parse(absl::AsciiStrToUpper(name), &state) &&
      state != v1::JOB_STATE_UNSPECIFIED) {
    return state;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--state: unknown job state \"", name,
      "\"; expected one of queued, starting, running, succeeded, failed, "
      "cancelled"));
}

namespace {

// Prints `message` as JSON, always ending in exactly one newline.
std::string MessageToJson(const google::protobuf::Message& message,
                          bool add_whitespace) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = add_whitespace;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    // Only possible for malformed Any/Duration values; never for our protos.
    return absl::StrCat("{\"error\": \"cannot print as JSON: ",
                        std::string(status.message()), "\"}\n");
  }
  if (out.empty() || out.back() != '\n') out += '\n';
  return out;
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message) {
  return MessageToJson(message, /*add_whitespace=*/true);
}

std::string ToJsonLine(const google::protobuf::Message& message) {
  return MessageToJson(message, /*add_whitespace=*/false);
}

std::string FormatJobsTable(const std::vector<v1::Job>& jobs, absl::Time now) {
  Table table({"ID", "NAME", "STATE", "WORKERS", "WORKLOAD", "STEP",
               "SUBMITTED"},
              {false, false, false, true, false, true, false});
  for (const v1::Job& job : jobs) {
    v1::JobProgress progress = job.progress();
    if (progress.total_steps() == 0) progress.set_total_steps(job.spec().steps());
    table.AddRow({job.id(), job.spec().name(), JobStateName(job.state()),
                  absl::StrCat(job.spec().world_size()),
                  JobWorkload(job.spec()), StepCell(progress),
                  Age(job.submit_time(), now)});
  }
  return table.Render();
}

std::string FormatJobDetails(const v1::Job& job, absl::Time now) {
  std::string out;
  auto line = [&out](absl::string_view key, absl::string_view value) {
    absl::StrAppend(&out, absl::StrFormat("%-11s %s\n",
                                          absl::StrCat(key, ":"), value));
  };
  line("id", job.id());
  line("name", job.spec().name());
  line("state", JobStateName(job.state()));
  if (!job.reason().empty()) line("reason", job.reason());
  line("workload", JobWorkload(job.spec()));
  line("world size", absl::StrCat(job.spec().world_size()));
  if (job.members_size() > 0 && job.members_size() != job.spec().world_size()) {
    // A restart at a smaller world (min_world_size).
    line("this epoch", absl::StrCat(job.members_size(), " workers"));
  }
  line("epoch", absl::StrCat(job.epoch()));
  if (job.spec().max_restarts() > 0 || job.restarts() > 0) {
    line("restarts", absl::StrCat(job.restarts(), " of ",
                                  job.spec().max_restarts()));
  }
  if (job.has_initialized_from()) {
    line("origin", InitializedFromText(job.initialized_from()));
  }
  if (job.has_resumed_from()) {
    line("resumed", absl::StrCat("from step ", job.resumed_from().step(), " (",
                                 job.resumed_from().path(), ")"));
  }
  v1::JobProgress progress = job.progress();
  if (progress.total_steps() == 0) progress.set_total_steps(job.spec().steps());
  line("progress", FormatProgressLine(progress));
  line("submitted", Timestamp(job.submit_time(), now));
  line("started", Timestamp(job.start_time(), now));
  line("ended", Timestamp(job.end_time(), now));
  if (job.start_time().seconds() != 0) {
    absl::Time end = job.end_time().seconds() != 0 ? FromProto(job.end_time())
                                                   : now;
    line("duration",
         HumanDuration(absl::Trunc(end - FromProto(job.start_time()),
                                   absl::Milliseconds(100))));
  }
  if (!job.output_path().empty()) line("output", job.output_path());
  if (!job.checkpoints().empty()) {
    out += "checkpoints:\n";
    Table table({"  STEP", "STATE", "SHARDS", "SIZE", "PATH"},
                {true, false, true, true, false});
    for (const v1::CheckpointRecord& c : job.checkpoints()) {
      table.AddRow({absl::StrCat(c.step()), CheckpointStateName(c.state()),
                    absl::StrCat(c.world_size()), HumanBytes(c.size_bytes()),
                    c.path()});
    }
    out += table.Render();
  }
  if (!job.members().empty()) {
    out += "members:\n";
    Table table({"  RANK", "WORKER", "HOST"}, {true, false, false});
    for (const v1::JobMember& m : job.members()) {
      table.AddRow({absl::StrCat(m.rank()), m.worker_id(), m.host()});
    }
    out += table.Render();
  }
  return out;
}

std::string FormatRestartLine(const v1::JobEvent::Restart& restart,
                              int max_restarts) {
  return absl::StrCat(
      "restart ", restart.restart(), " of ", max_restarts, ": epoch ",
      restart.epoch(), " on ", restart.world_size(), " workers from step ",
      restart.has_resumed_from() ? restart.resumed_from().step() : 0,
      restart.cause().empty() ? "" : ": ", restart.cause());
}

std::string FormatCheckpointLine(const v1::CheckpointRecord& checkpoint) {
  std::string out = absl::StrCat("checkpoint step ", checkpoint.step(), " ",
                                 CheckpointStateName(checkpoint.state()));
  if (checkpoint.state() == v1::CheckpointRecord::FAILED) {
    absl::StrAppend(&out, ": ", checkpoint.reason());
  } else {
    absl::StrAppend(&out, ": ", checkpoint.world_size(), " shards, ",
                    HumanBytes(checkpoint.size_bytes()), " at ",
                    checkpoint.path());
  }
  return out;
}

std::string FormatCheckpointsTable(const v1::Job& job, absl::Time now) {
  std::string out;
  if (job.has_initialized_from()) {
    absl::StrAppend(&out, InitializedFromText(job.initialized_from()), "\n");
  }
  if (job.checkpoints().empty()) {
    absl::StrAppend(&out, job.id(), ": no checkpoints\n");
    return out;
  }
  Table table({"STEP", "STATE", "WORLD", "SIZE", "TIME", "PATH", "REASON"},
              {true, false, true, true, false, false, false});
  for (const v1::CheckpointRecord& c : job.checkpoints()) {
    table.AddRow({absl::StrCat(c.step()), CheckpointStateName(c.state()),
                  absl::StrCat(c.world_size()), HumanBytes(c.size_bytes()),
                  Age(c.time(), now), c.path(),
                  c.reason().empty() ? "-" : c.reason()});
  }
  return out + table.Render();
}

namespace {

// Up to three parameter names, else the first two and the count.
std::string ParameterList(
    const google::protobuf::RepeatedPtrField<std::string>& names) {
  const int n = names.size();
  if (n <= 3) return absl::StrJoin(names, ",");
  return absl::StrCat(names[0], ",", names[1], ",... (", n, ")");
}

}  // namespace

std::string FormatShardTable(const v1::ShardAssignment& a) {
  std::string out;
  const bool sharded = a.policy() == v1::JobSpec::SHARDED;
  // SHARDED: a row per rank's element range of each bucket.
  Table buckets =
      sharded ? Table({"BUCKET", "RANGE", "BYTES", "ELEMENTS", "DTYPE",
                       "OWNER", "WORKER", "PARAMS"},
                      {true, false, true, true, false, true, false, false})
              : Table({"BUCKET", "BYTES", "ELEMENTS", "DTYPE", "OWNER",
                       "WORKER", "PARAMS"},
                      {true, true, true, false, true, false, false});
  for (const v1::BucketAssignment& b : a.buckets()) {
    if (!sharded) {
      buckets.AddRow({absl::StrCat(b.index()), HumanBytes(b.bytes()),
                      absl::StrCat(b.num_elements()), b.dtype(),
                      absl::StrCat(b.owner_rank()), b.owner_worker_id(),
                      ParameterList(b.parameter_names())});
      continue;
    }
    for (const v1::ShardRange& r : b.ranges()) {
      buckets.AddRow(
          {absl::StrCat(b.index()),
           absl::StrCat(r.begin_element(), "-", r.end_element()),
           HumanBytes(r.bytes()),
           absl::StrCat(r.end_element() - r.begin_element()), b.dtype(),
           absl::StrCat(r.owner_rank()), r.owner_worker_id(),
           r.parameter_names().empty() ? "-"
                                       : ParameterList(r.parameter_names())});
    }
  }
  out += buckets.Render();
  out += "\n";
  Table ranks({"RANK", "WORKER", "BUCKETS", "BYTES", "ELEMENTS", "SHARE"},
              {true, false, true, true, true, true});
  for (const v1::RankShard& r : a.ranks()) {
    std::string share = "-";
    if (a.total_bytes() > 0) {
      share = absl::StrFormat(
          "%.1f%%", 100.0 * static_cast<double>(r.owned_bytes()) /
                        static_cast<double>(a.total_bytes()));
    }
    ranks.AddRow({absl::StrCat(r.rank()), r.worker_id(),
                  absl::StrCat(r.num_buckets()), HumanBytes(r.owned_bytes()),
                  absl::StrCat(r.owned_elements()), share});
  }
  out += ranks.Render();
  out += "\n";
  absl::StrAppend(&out, "job ", a.job_id(), "  policy ", PolicyName(a.policy()),
                  "  imbalance ", absl::StrFormat("%.3f", a.imbalance()),
                  "  epoch ", a.epoch(), "  buckets ", a.buckets_size(),
                  "  total ", HumanBytes(a.total_bytes()), "\n");
  return out;
}

std::string FormatWorkersTable(const std::vector<v1::WorkerInfo>& workers) {
  Table table({"ID", "NAME", "HOST", "DEVICE", "STATE", "JOB", "RANK",
               "HEARTBEAT"},
              {false, false, false, false, false, false, true, true});
  for (const v1::WorkerInfo& w : workers) {
    const bool has_job = !w.job_id().empty();
    table.AddRow(
        {w.id(), w.name(), w.host(), w.device().empty() ? "-" : w.device(),
         WorkerStateName(w.state()), has_job ? w.job_id() : "-",
         has_job ? absl::StrCat(w.rank()) : "-",
         w.has_heartbeat_age()
             ? absl::StrCat(HumanDuration(FromProto(w.heartbeat_age())),
                            " ago")
             : "-"});
  }
  return table.Render();
}

std::string FormatProgressLine(const v1::JobProgress& p) {
  std::string line = absl::StrCat("step ", StepCell(p));
  if (p.total_steps() > 0) absl::StrAppend(&line, " (", Percent(p), "%)");
  std::string figures = ProgressFigures(p);
  if (!figures.empty()) absl::StrAppend(&line, "  ", figures);
  return line;
}

std::string FormatProgressBar(const v1::JobProgress& p, int bar_width) {
  bar_width = std::max(bar_width, 1);
  int filled = 0;
  if (p.total_steps() > 0) {
    const int64_t step = std::clamp<int64_t>(p.step(), 0, p.total_steps());
    filled = static_cast<int>(step * bar_width / p.total_steps());
  }
  std::string bar = absl::StrCat("[", std::string(filled, '#'),
                                 std::string(bar_width - filled, '-'), "]  ",
                                 StepCell(p), "  ", Percent(p), "%");
  std::string figures = ProgressFigures(p);
  if (!figures.empty()) absl::StrAppend(&bar, "  ", figures);
  return bar;
}

}  // namespace pshard::cli
