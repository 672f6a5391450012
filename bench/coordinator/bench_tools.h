// The load generator's instruments, apart from the benchmark's driver
// (coordinator_bench.cc) that runs the phases with them: a latency recorder
// by phase and step, a gate on concurrent calls, the coordinator's CPU and
// memory from /proc, the heartbeat reply read off the wire, and the state of
// one simulated worker.
#ifndef PSHARD_BENCH_COORDINATOR_BENCH_TOOLS_H_
#define PSHARD_BENCH_COORDINATOR_BENCH_TOOLS_H_

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/coordinator/coordinator_bench.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/grpcpp.h"

namespace pshard {
namespace bench {

// Latencies per phase and method, from any thread.
class Recorder {
 public:
  // A phase; its steps, if any, are recorded under "phase/step" and
  // "phase/group" too.
  void SetPhase(const std::string& phase) {
    absl::MutexLock lock(&mu_);
    phase_ = phase;
    step_.clear();
    group_.clear();
  }
  void SetStep(const std::string& step, const std::string& group) {
    absl::MutexLock lock(&mu_);
    step_ = absl::StrCat(phase_, "/", step);
    group_ = absl::StrCat(phase_, "/", group);
  }
  void Add(const std::string& method, absl::Duration d, bool ok) {
    absl::MutexLock lock(&mu_);
    for (const std::string* key : std::initializer_list<const std::string*>{
             &kWhole, &phase_, &step_, &group_}) {
      if (key != &kWhole && key->empty()) continue;
      auto& e = entries_[*key][method];
      e.samples.push_back(absl::ToDoubleMilliseconds(d));
      if (!ok) ++e.errors;
    }
  }
  // "" for the whole run.
  std::map<std::string, LatencyStats> Stats(const std::string& phase) {
    absl::MutexLock lock(&mu_);
    std::map<std::string, LatencyStats> out;
    for (auto& [method, e] : entries_[phase]) {
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
  static inline const std::string kWhole;
  absl::Mutex mu_;
  std::string phase_ ABSL_GUARDED_BY(mu_) = "register";
  std::string step_ ABSL_GUARDED_BY(mu_);
  std::string group_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, Entry>> entries_ ABSL_GUARDED_BY(mu_);
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

// The process's CPU time (user + system) and resident memory, from /proc.
ProcStats ReadProc(pid_t pid);

// What the benchmark needs from a HeartbeatResponse, read straight off the
// wire: parsing thousands of 100 KB RunJob directives (spec + 4096 members)
// would make the load generator, on the same cores, the bottleneck.
struct DirectiveHead {
  bool run_job = false;  // else abort_job
  std::string job_id;
  int64_t epoch = 0;
  int rank = 0;  // proto3: absent means 0
};

// Appends the directives of the serialized HeartbeatResponse `bytes` to
// `out`; false if it does not parse.
bool ScanHeartbeatResponse(const std::string& bytes,
                           std::vector<DirectiveHead>* out);

std::string BufferToString(const grpc::ByteBuffer& buffer);
grpc::ByteBuffer ToBuffer(const google::protobuf::MessageLite& message);

// Calls the coordinator refused for their credential (PERMISSION_DENIED or
// UNAUTHENTICATED), by method, from any thread. With tokens on every call
// carries its caller's own token, so any refusal is a bug in the bench or
// the server, and the run is an error.
class Denials {
 public:
  // Counts `s` if it is a refusal.
  void Note(const std::string& method, const grpc::Status& s);
  int64_t count() const;
  // "RegisterWorker 2, Heartbeat 1 (first: RegisterWorker: <message>)".
  std::string Summary() const;

 private:
  mutable absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> by_method_ ABSL_GUARDED_BY(mu_);
  std::string first_ ABSL_GUARDED_BY(mu_);
};

// Adds a caller's "authorization" metadata ("Bearer TOKEN") to a call;
// nothing when `authorization` is empty (tokens off).
inline void AddAuthorization(grpc::ClientContext* ctx,
                             const std::string& authorization) {
  if (!authorization.empty()) ctx->AddMetadata("authorization", authorization);
}

// One asynchronous unary call in flight: what the callback needs, freed by
// it.
template <typename Request, typename Response>
struct AsyncCall {
  grpc::ClientContext ctx;
  Request req;
  Response resp;
  absl::Time start;
};

// One simulated worker: its identity and the job it was told to run.
struct SimState {
  std::string name;
  std::string id;
  // "Bearer <its own token>" with tokens on; empty otherwise.
  std::string authorization;
  std::atomic<bool> in_flight{false};
  absl::Mutex mu;
  std::string job_id ABSL_GUARDED_BY(mu);
  int64_t epoch ABSL_GUARDED_BY(mu) = 0;
  int rank ABSL_GUARDED_BY(mu) = -1;
};

}  // namespace bench
}  // namespace pshard

#endif  // PSHARD_BENCH_COORDINATOR_BENCH_TOOLS_H_
