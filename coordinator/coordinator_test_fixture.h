// The fixture shared by the Coordinator facade's tests (coordinator_*_test.cc,
// split by concern): a real Coordinator on a FakeClock over an in-memory (or
// temporary) SQLite store, and helpers that drive workers and jobs through
// the public API. The units behind the facade have their own tests.
#ifndef PSHARD_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_
#define PSHARD_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/fault_state_store.h"
#include "coordinator/sqlite.h"
#include "coordinator/state_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shard/layout.h"
#include "shard/layout_fingerprint.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace coordinator {


// Records the one result of an asynchronous call. The result lives on the
// heap, shared with the callback: a wait still parked when the test's locals
// go is answered (Cancelled) by the Coordinator's destructor afterwards, and
// must not write into a Capture that is gone.
template <typename T>
struct Capture {
  std::shared_ptr<std::optional<absl::StatusOr<T>>> slot =
      std::make_shared<std::optional<absl::StatusOr<T>>>();
  std::optional<absl::StatusOr<T>>& result = *slot;
  std::function<void(absl::StatusOr<T>)> Callback() {
    return [slot = slot](absl::StatusOr<T> r) {
      ASSERT_FALSE(slot->has_value()) << "callback called twice";
      *slot = std::move(r);
    };
  }
};

struct StatusCapture {
  std::shared_ptr<std::optional<absl::Status>> slot =
      std::make_shared<std::optional<absl::Status>>();
  std::optional<absl::Status>& result = *slot;
  std::function<void(absl::Status)> Callback() {
    return [slot = slot](absl::Status s) { *slot = std::move(s); };
  }
};

inline v1::JobSpec Spec(int world_size, int64_t steps = 10) {
  v1::JobSpec spec;
  spec.set_name("test");
  spec.set_world_size(world_size);
  spec.mutable_synthetic()->set_num_parameters(1000);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  spec.set_steps(steps);
  return spec;
}

inline v1::ReportBucketsRequest Buckets(const v1::Job& job, int rank,
                                 std::vector<int64_t> sizes) {
  v1::ReportBucketsRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_rank(rank);
  req.set_worker_id(job.members(rank).worker_id());
  for (size_t i = 0; i < sizes.size(); ++i) {
    v1::BucketLayout* b = req.add_buckets();
    b->set_index(static_cast<int>(i));
    v1::BucketParameter* p = b->add_parameters();
    p->set_name(absl::StrCat("t", i));
    p->set_num_elements(sizes[i]);
    p->set_dtype("F32");
  }
  return req;
}

inline Coordinator::LayoutReport LayoutReport(const v1::Job& job, int rank,
                                       EncodedLayout layout,
                                       const std::string& fingerprint) {
  Coordinator::LayoutReport r;
  r.job_id = job.id();
  r.epoch = job.epoch();
  r.rank = rank;
  r.worker_id = job.members(rank).worker_id();
  r.layout = std::move(layout);
  r.fingerprint = fingerprint;
  return r;
}

// A database path in a fresh directory (no earlier run's file or WAL).
inline std::string TempPath(const std::string& name) {
  return absl::StrCat(::pshard::testing::MakeTempDir("db"), "/", name);
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(":memory:"); }

  void Open(const std::string& path) {
    c_.reset();
    ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(path));
    ASSERT_OK_AND_ASSIGN(c_, Coordinator::Create(options_, &clock_, std::move(store)));
  }

  // Open, with a FaultStateStore between the coordinator and the store; the
  // coordinator owns it, the test arms it.
  FaultStateStore* OpenWithFaults(const std::string& path) {
    c_.reset();
    absl::StatusOr<std::unique_ptr<StateStore>> inner = StateStore::Open(path);
    EXPECT_OK(inner);
    if (!inner.ok()) return nullptr;
    auto store = std::make_unique<FaultStateStore>(*std::move(inner));
    FaultStateStore* faults = store.get();
    absl::StatusOr<std::unique_ptr<Coordinator>> c =
        Coordinator::Create(options_, &clock_, std::move(store));
    EXPECT_OK(c);
    if (!c.ok()) return nullptr;
    c_ = *std::move(c);
    return faults;
  }

  struct Worker {
    std::string id;
    std::string incarnation;
  };

  Worker Register(const std::string& name, const std::string& host = "h1",
                  const std::string& incarnation = "inc-1") {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_incarnation(incarnation);
    req.set_host(host);
    req.set_address(absl::StrCat(host, ":7071"));
    req.set_device_kind(v1::CPU);
    auto resp = c_->RegisterWorker(req);
    EXPECT_OK(resp);
    return {resp.ok() ? resp->worker_id() : "", incarnation};
  }

  absl::StatusOr<v1::HeartbeatResponse> Beat(
      const Worker& w, v1::WorkerState state = v1::IDLE,
      const std::string& job_id = "", int64_t epoch = 0) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w.id);
    req.set_incarnation(w.incarnation);
    req.set_state(state);
    req.set_job_id(job_id);
    req.set_epoch(epoch);
    return c_->Heartbeat(req);
  }

  // Heartbeats as IDLE; expects a RunJob and acknowledges it with a BUSY
  // heartbeat. Returns the directive.
  v1::RunJobDirective StartRank(const Worker& w) {
    auto resp = Beat(w);
    EXPECT_OK(resp);
    v1::RunJobDirective run;
    if (!resp.ok()) return run;
    for (const auto& d : resp->directives()) {
      if (d.has_run_job()) run = d.run_job();
    }
    EXPECT_FALSE(run.job_id().empty()) << "no RunJob for " << w.id;
    EXPECT_OK(Beat(w, v1::BUSY, run.job_id(), run.epoch()));
    return run;
  }

  // Submits a two-rank job, which goes to `a` and `b`, and starts both ranks.
  // Returns the job as it was before the ranks started (epoch 1, STARTING).
  v1::Job StartJobOn(const Worker& a, const Worker& b) {
    auto submitted = c_->SubmitJob(Spec(2));
    EXPECT_OK(submitted);
    if (!submitted.ok()) return v1::Job();
    v1::Job job = GetJob(submitted->id());
    StartRank(a);
    StartRank(b);
    return job;
  }

  // Opens an attachment of `w`, as its Attach stream would; Detach ends it
  // as that stream's closed connection would.
  absl::StatusOr<int64_t> Attach(const Worker& w) {
    v1::AttachRequest req;
    req.set_worker_id(w.id);
    req.set_incarnation(w.incarnation);
    return c_->AttachWorker(req);
  }

  absl::Status Detach(const Worker& w, int64_t attachment) {
    return c_->WorkerDetached(w.id, w.incarnation, attachment);
  }

  // A two-rank job with `spec` on a (w-1) and b (w-2), both ranks started
  // and RUNNING.
  v1::Job StartRunning(const v1::JobSpec& spec, const Worker& a,
                       const Worker& b) {
    auto submitted = c_->SubmitJob(spec);
    EXPECT_OK(submitted);
    if (!submitted.ok()) return v1::Job();
    StartRank(a);
    StartRank(b);
    const v1::Job job = GetJob(submitted->id());
    PublishLayout(job, {10});
    return GetJob(job.id());
  }

  v1::Job GetJob(const std::string& id) {
    auto job = c_->GetJob(id);
    EXPECT_OK(job);
    return job.ok() ? *job : v1::Job();
  }

  // Registers workers "a" and "b" and submits a two-rank job, which starts on
  // them at once; returns it as GetJob sees it (STARTING, with its members).
  v1::Job StartTwoRankJob() {
    Register("a");
    Register("b");
    absl::StatusOr<v1::Job> job = c_->SubmitJob(Spec(2));
    EXPECT_OK(job);
    return job.ok() ? GetJob(job->id()) : v1::Job();
  }

  std::vector<v1::JobEvent> Events(const std::string& id) {
    auto batch = c_->GetEvents(id, 0, 100000);
    EXPECT_OK(batch);
    return batch.ok() ? batch->events : std::vector<v1::JobEvent>();
  }

  // Drives a job from STARTING to RUNNING: every rank reports `sizes`.
  void PublishLayout(const v1::Job& job, std::vector<int64_t> sizes) {
    for (int r = 0; r < job.members_size(); ++r) {
      ASSERT_OK(c_->ReportBuckets(Buckets(job, r, sizes)));
    }
  }

  static v1::ReportResultRequest ResultRequest(const v1::Job& job, int rank,
                                               bool ok,
                                               const std::string& error = "") {
    v1::ReportResultRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_rank(rank);
    req.set_worker_id(job.members(rank).worker_id());
    req.set_ok(ok);
    req.set_error(error);
    req.set_final_step(job.spec().steps());
    return req;
  }

  absl::Status Result(const v1::Job& job, int rank, bool ok,
                      const std::string& error = "") {
    return c_->ReportResult(ResultRequest(job, rank, ok, error));
  }

  v1::WorkerState StateOf(const std::string& id) {
    auto w = c_->GetWorker(id);
    return w.ok() ? w->state() : v1::WORKER_STATE_UNSPECIFIED;
  }

  // The first page of workers (every worker, in these tests).
  std::vector<v1::WorkerInfo> Workers(bool include_lost) {
    auto page = c_->ListWorkers(include_lost, 1000, "");
    EXPECT_OK(page);
    return page.ok() ? page->workers : std::vector<v1::WorkerInfo>();
  }

  static bool HasAbort(const v1::HeartbeatResponse& resp, const std::string& job) {
    for (const auto& d : resp.directives()) {
      if (d.has_abort_job() && d.abort_job().job_id() == job) return true;
    }
    return false;
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  std::unique_ptr<Coordinator> c_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_
