#include "coordinator/coordinator.h"

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_matchers.h"
#include "common/fake_clock.h"
#include "shard/layout.h"
#include "shard/layout_fingerprint.h"
#include "coordinator/sqlite.h"
#include "coordinator/state_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// Records the one result of an asynchronous call.
template <typename T>
struct Capture {
  std::optional<absl::StatusOr<T>> result;
  std::function<void(absl::StatusOr<T>)> Callback() {
    return [this](absl::StatusOr<T> r) {
      ASSERT_FALSE(result.has_value()) << "callback called twice";
      result = std::move(r);
    };
  }
};

struct StatusCapture {
  std::optional<absl::Status> result;
  std::function<void(absl::Status)> Callback() {
    return [this](absl::Status s) { result = s; };
  }
};

v1::JobSpec Spec(int world_size, int64_t steps = 10) {
  v1::JobSpec spec;
  spec.set_name("test");
  spec.set_world_size(world_size);
  spec.mutable_synthetic()->set_num_parameters(1000);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  spec.set_steps(steps);
  return spec;
}

v1::ReportBucketsRequest Buckets(const v1::Job& job, int rank,
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

Coordinator::LayoutReport LayoutReport(const v1::Job& job, int rank,
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
std::string TempPath(const std::string& name) {
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

// ---- Membership ----

TEST_F(CoordinatorTest, RegisterGivesStableIds) {
  Worker a = Register("pod-a");
  Worker b = Register("pod-b");
  EXPECT_EQ(a.id, "w-1");
  EXPECT_EQ(b.id, "w-2");
  EXPECT_EQ(Register("pod-a").id, "w-1");  // same name, same id
  EXPECT_OK(Beat(a));
  auto workers = Workers(false);
  ASSERT_THAT(workers, SizeIs(2));
  EXPECT_EQ(workers[0].name(), "pod-a");
  EXPECT_EQ(workers[0].state(), v1::IDLE);
  EXPECT_EQ(workers[0].rank(), -1);
  EXPECT_EQ(workers[0].host(), "h1");
}

TEST_F(CoordinatorTest, RegisterRejectsBadInput) {
  auto reg = [&](auto mutate) {
    v1::RegisterWorkerRequest req;
    req.set_name("ok-name");
    req.set_incarnation("i");
    mutate(req);
    return c_->RegisterWorker(req);
  };
  using R = v1::RegisterWorkerRequest;
  EXPECT_THAT(reg([](R& r) { r.set_name(""); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  EXPECT_THAT(reg([](R& r) { r.set_name("bad name"); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  EXPECT_THAT(reg([](R& r) { r.set_name(std::string(254, 'a')); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  EXPECT_THAT(reg([](R& r) { r.set_incarnation(""); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incarnation")));
  EXPECT_THAT(reg([](R& r) { r.set_incarnation(std::string(65, 'a')); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incarnation")));
  EXPECT_THAT(reg([](R& r) { r.set_address(std::string(262, 'a')); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("address")));
  EXPECT_THAT(reg([](R& r) { r.set_host(std::string(254, 'a')); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host")));
  EXPECT_THAT(reg([](R& r) { r.set_device(std::string(257, 'a')); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device")));
  EXPECT_THAT(reg([](R& r) { r.set_device_kind(static_cast<v1::DeviceKind>(99)); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device_kind")));
  EXPECT_THAT(Workers(true), SizeIs(0));
}

TEST_F(CoordinatorTest, RegistryIsCapped) {
  options_.max_workers = 2;
  Open(":memory:");
  Register("a");
  Register("b");
  v1::RegisterWorkerRequest req;
  req.set_name("c");
  req.set_incarnation("i");
  EXPECT_THAT(c_->RegisterWorker(req), StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
  EXPECT_EQ(Register("a").id, "w-1");  // known names still re-register
}

TEST_F(CoordinatorTest, HeartbeatFromUnknownOrReplacedWorkerIsNotFound) {
  Worker a = Register("pod-a");
  EXPECT_THAT(Beat({"w-99", "inc-1"}), StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown")));
  EXPECT_THAT(Beat({"garbage", "inc-1"}), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  Worker a2 = Register("pod-a", "h1", "inc-2");
  EXPECT_EQ(a2.id, a.id);
  EXPECT_THAT(Beat(a), StatusIs(absl::StatusCode::kNotFound, HasSubstr("incarnation")));
  EXPECT_OK(Beat(a2));
}

TEST_F(CoordinatorTest, SilentWorkerBecomesLostAndMayRegisterAgain) {
  Worker a = Register("pod-a");
  clock_.Advance(absl::Seconds(4));
  c_->Tick();
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  ASSERT_OK(Beat(a));
  clock_.Advance(absl::Seconds(5));
  c_->Tick();
  EXPECT_EQ(StateOf(a.id), v1::IDLE);  // exactly the timeout: not yet
  clock_.Advance(absl::Milliseconds(1));
  c_->Tick();
  EXPECT_EQ(StateOf(a.id), v1::LOST);
  EXPECT_THAT(Workers(false), SizeIs(0));
  EXPECT_THAT(Beat(a), StatusIs(absl::StatusCode::kNotFound, HasSubstr("lost")));
  EXPECT_EQ(Register("pod-a").id, a.id);
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  // Registered again after every worker was lost: still watched.
  clock_.Advance(absl::Seconds(5) + absl::Milliseconds(1));
  c_->Tick();
  EXPECT_EQ(StateOf(a.id), v1::LOST);
}

TEST_F(CoordinatorTest, DrainStopsSchedulingAndUndrainResumesIt) {
  Worker a = Register("pod-a");
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo info, c_->DrainWorker("pod-a"));  // by name
  EXPECT_EQ(info.id(), a.id);
  EXPECT_EQ(info.state(), v1::DRAINING);
  EXPECT_TRUE(info.drain_requested());
  ASSERT_OK(c_->DrainWorker(a.id));  // by id; idempotent
  EXPECT_EQ(StateOf(a.id), v1::DRAINING);
  // The worker is not told to exit, and gets no job.
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a));
  EXPECT_THAT(resp.directives(), SizeIs(0));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  EXPECT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  EXPECT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  // Undrain: the queued job starts on it at once.
  ASSERT_OK_AND_ASSIGN(info, c_->UndrainWorker(a.id));
  EXPECT_FALSE(info.drain_requested());
  EXPECT_EQ(info.state(), v1::BUSY);
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  ASSERT_OK(c_->UndrainWorker(a.id));  // idempotent
  EXPECT_EQ(StartRank(a).job_id(), job.id());
}

TEST_F(CoordinatorTest, DrainingABusyWorkerLetsItsJobFinish) {
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {1, 2});
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo info, c_->DrainWorker(a.id));
  EXPECT_EQ(info.state(), v1::DRAINING);
  EXPECT_EQ(info.job_id(), job.id());  // still running it
  // The job goes on: heartbeats, then every rank finishes.
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, job.id(), 1));
  EXPECT_THAT(resp.directives(), SizeIs(0));
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  for (int r = 0; r < 2; ++r) ASSERT_OK(Result(job, r, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
  ASSERT_OK_AND_ASSIGN(info, c_->GetWorker(a.id));
  EXPECT_EQ(info.state(), v1::DRAINING);
  EXPECT_EQ(info.job_id(), "");
  EXPECT_EQ(StateOf(b.id), v1::IDLE);
  // Taken out of scheduling: a two-rank job waits, a one-rank one goes to b.
  ASSERT_OK_AND_ASSIGN(v1::Job two, c_->SubmitJob(Spec(2)));
  EXPECT_EQ(GetJob(two.id()).state(), v1::QUEUED);
  ASSERT_OK(c_->CancelJob(two.id(), ""));
  ASSERT_OK_AND_ASSIGN(v1::Job one, c_->SubmitJob(Spec(1)));
  v1::Job started = GetJob(one.id());
  EXPECT_EQ(started.state(), v1::STARTING);
  EXPECT_EQ(started.members(0).worker_id(), b.id);
}

TEST_F(CoordinatorTest, DrainIsDurableAndEndsWithANewIncarnation) {
  const std::string path = TempPath("drain.db");
  Open(path);
  Worker a = Register("a");
  ASSERT_OK(c_->DrainWorker("a"));
  Open(path);  // a coordinator restart keeps it
  ASSERT_OK(Beat(a));
  EXPECT_EQ(StateOf(a.id), v1::DRAINING);
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  EXPECT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  // The worker restarts (a replacement pod): schedulable again.
  Worker again = Register("a", "h1", "inc-2");
  EXPECT_EQ(again.id, a.id);
  EXPECT_EQ(StateOf(a.id), v1::BUSY);
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
}

TEST_F(CoordinatorTest, DrainValidatesTheWorker) {
  Worker a = Register("a");
  EXPECT_THAT(c_->DrainWorker("w-9"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no worker \"w-9\"")));
  EXPECT_THAT(c_->UndrainWorker("pod-x"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no worker \"pod-x\"")));
  EXPECT_THAT(c_->GetWorker(""), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  clock_.Advance(absl::Seconds(6));
  c_->Tick();
  ASSERT_EQ(StateOf(a.id), v1::LOST);
  EXPECT_THAT(c_->DrainWorker(a.id),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("worker w-1 (a) is LOST")));
  EXPECT_THAT(c_->UndrainWorker("a"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("LOST")));
}

TEST_F(CoordinatorTest, AnIdWinsOverAnotherWorkersName) {
  Worker a = Register("a");
  Worker named_like_a = Register(a.id);  // a worker whose name is "w-1"
  ASSERT_EQ(named_like_a.id, "w-2");
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo info, c_->DrainWorker("w-1"));
  EXPECT_EQ(info.name(), "a");
  EXPECT_EQ(StateOf(named_like_a.id), v1::IDLE);
}

// ---- Jobs ----

TEST_F(CoordinatorTest, SubmitValidatesTheSpec) {
  v1::JobSpec spec = Spec(2);
  spec.set_world_size(0);
  EXPECT_THAT(c_->SubmitJob(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world_size")));
  spec = Spec(2);
  spec.clear_name();
  EXPECT_THAT(c_->SubmitJob(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  ASSERT_OK_AND_ASSIGN(auto jobs, c_->ListJobs({}, 0, ""));
  EXPECT_THAT(jobs.jobs, SizeIs(0));
}

TEST_F(CoordinatorTest, SubmitAppliesDefaultsAndQueues) {
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  EXPECT_EQ(job.id(), "job-1");
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.spec().assignment_policy(), v1::JobSpec::BALANCED);
  EXPECT_EQ(job.spec().backend(), v1::JobSpec::AUTO);
  EXPECT_TRUE(job.has_submit_time());
  EXPECT_FALSE(job.has_start_time());
  EXPECT_EQ(job.progress().total_steps(), 10);
  auto events = Events(job.id());
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0].sequence(), 1);
  EXPECT_EQ(events[0].state_change().to(), v1::QUEUED);
}

TEST_F(CoordinatorTest, UnfinishedJobsAreCapped) {
  options_.max_unfinished_jobs = 1;
  Open(":memory:");
  ASSERT_OK(c_->SubmitJob(Spec(1)));
  EXPECT_THAT(c_->SubmitJob(Spec(1)), StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
}

TEST_F(CoordinatorTest, FullLifecycle) {
  Worker a = Register("pod-a");
  Worker b = Register("pod-b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  job = GetJob(job.id());
  ASSERT_EQ(job.state(), v1::STARTING);
  EXPECT_EQ(job.epoch(), 1);
  EXPECT_TRUE(job.has_start_time());
  ASSERT_THAT(job.members(), SizeIs(2));
  EXPECT_EQ(StateOf(a.id), v1::BUSY);

  v1::RunJobDirective run_a = StartRank(a);
  v1::RunJobDirective run_b = StartRank(b);
  EXPECT_EQ(run_a.job_id(), job.id());
  EXPECT_EQ(run_a.epoch(), 1);
  EXPECT_EQ(run_a.world_size(), 2);
  EXPECT_EQ(run_a.rank() + run_b.rank(), 1);
  EXPECT_EQ(run_a.spec().assignment_policy(), v1::JobSpec::BALANCED);
  // No member list: ranks find each other through the rendezvous store.
  EXPECT_THAT(run_a.members(), SizeIs(0));
  // Acknowledged: no more RunJob.
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, job.id(), 1));
  EXPECT_THAT(resp.directives(), SizeIs(0));

  // Rendezvous.
  v1::KvPutRequest put;
  put.set_job_id(job.id());
  put.set_epoch(1);
  put.set_key("nccl-id");
  put.set_value("\x01\x02");
  ASSERT_OK(c_->KvPut(put));
  Capture<std::string> got;
  c_->KvGet(job.id(), 1, "nccl-id", clock_.Now() + absl::Seconds(1), got.Callback());
  ASSERT_TRUE(got.result.has_value());
  EXPECT_THAT(*got.result, IsOk());
  EXPECT_EQ(**got.result, "\x01\x02");

  // Assignment.
  Capture<Coordinator::AssignmentPtr> assignment;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(30), assignment.Callback());
  EXPECT_FALSE(assignment.result.has_value());
  EXPECT_THAT(c_->GetShardAssignment(job.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("0 of 2")));
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {100, 300, 200})));
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 1, {100, 300, 200})));
  ASSERT_TRUE(assignment.result.has_value());
  ASSERT_OK(*assignment.result);
  EXPECT_EQ((**assignment.result)->epoch(), 1);
  EXPECT_THAT((**assignment.result)->buckets(), SizeIs(3));
  EXPECT_DOUBLE_EQ((**assignment.result)->imbalance(), 1.0);  // 1200 | 1200
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  ASSERT_OK_AND_ASSIGN(auto published, c_->GetShardAssignment(job.id()));
  EXPECT_EQ(published.total_bytes(), 2400);

  // Progress.
  v1::ReportProgressRequest progress;
  progress.set_job_id(job.id());
  progress.set_epoch(1);
  progress.set_rank(0);
  progress.set_worker_id(job.members(0).worker_id());
  progress.mutable_progress()->set_step(3);
  progress.mutable_progress()->set_loss(0.5);
  progress.mutable_progress()->set_bytes_sent(1234);
  ASSERT_OK_AND_ASSIGN(auto presp, c_->ReportProgress(progress));
  EXPECT_FALSE(presp.abort());
  job = GetJob(job.id());
  EXPECT_EQ(job.progress().step(), 3);
  EXPECT_EQ(job.progress().total_steps(), 10);
  EXPECT_DOUBLE_EQ(job.progress().loss(), 0.5);

  // Results.
  ASSERT_OK(Result(job, 1, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  EXPECT_EQ(StateOf(job.members(1).worker_id()), v1::IDLE);  // released at once
  ASSERT_OK(Result(job, 1, true));  // a retry is harmless
  ASSERT_OK(Result(job, 0, true));
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.progress().step(), 10);
  EXPECT_TRUE(job.has_end_time());
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  EXPECT_EQ(StateOf(b.id), v1::IDLE);

  // The event log: sequences from 1 without gaps, the state changes in order.
  std::vector<v1::JobState> states;
  auto events = Events(job.id());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i) + 1);
    EXPECT_TRUE(events[i].has_time());
    if (events[i].has_state_change()) states.push_back(events[i].state_change().to());
  }
  EXPECT_THAT(states, ElementsAre(v1::QUEUED, v1::STARTING, v1::RUNNING, v1::SUCCEEDED));
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

TEST_F(CoordinatorTest, GangSchedulingIsFifoAndGroupsRanksByHost) {
  Worker a = Register("a1", "host-a");
  Worker b1 = Register("b1", "host-b");
  Worker a2 = Register("a2", "host-a");
  ASSERT_OK_AND_ASSIGN(v1::Job j1, c_->SubmitJob(Spec(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job j2, c_->SubmitJob(Spec(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job j3, c_->SubmitJob(Spec(1)));
  j1 = GetJob(j1.id());
  ASSERT_EQ(j1.state(), v1::STARTING);
  // Both ranks on host-a (the host with the most idle workers).
  EXPECT_EQ(j1.members(0).worker_id(), a.id);
  EXPECT_EQ(j1.members(1).worker_id(), a2.id);
  EXPECT_EQ(j1.members(0).host(), "host-a");
  // j2 needs 2 and only 1 is idle; j3 could fit but waits behind j2 (FIFO).
  EXPECT_EQ(GetJob(j2.id()).state(), v1::QUEUED);
  EXPECT_EQ(GetJob(j3.id()).state(), v1::QUEUED);
  ASSERT_OK(c_->CancelJob(j1.id(), ""));
  EXPECT_EQ(GetJob(j2.id()).state(), v1::STARTING);
  EXPECT_EQ(GetJob(j3.id()).state(), v1::STARTING);
  EXPECT_EQ(StateOf(b1.id), v1::BUSY);
  // Disjoint workers.
  std::set<std::string> used;
  const v1::Job s2 = GetJob(j2.id());
  const v1::Job s3 = GetJob(j3.id());
  for (const auto& m : s2.members()) used.insert(m.worker_id());
  for (const auto& m : s3.members()) used.insert(m.worker_id());
  EXPECT_THAT(used, SizeIs(3));
}

TEST_F(CoordinatorTest, NewWorkersStartAQueuedJob) {
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  Register("a");
  EXPECT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  Register("b");
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
}

TEST_F(CoordinatorTest, CancelInEveryState) {
  EXPECT_THAT(c_->CancelJob("job-9", ""), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(c_->CancelJob("bogus", ""), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  ASSERT_OK_AND_ASSIGN(v1::Job queued, c_->SubmitJob(Spec(3)));
  EXPECT_THAT(c_->CancelJob(queued.id(), std::string(1025, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reason")));
  ASSERT_OK_AND_ASSIGN(v1::Job c1, c_->CancelJob(queued.id(), "not needed"));
  EXPECT_EQ(c1.state(), v1::CANCELLED);
  EXPECT_THAT(c1.reason(), HasSubstr("not needed"));
  EXPECT_THAT(c_->CancelJob(queued.id(), ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("CANCELLED")));

  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job running = StartJobOn(a, b);
  PublishLayout(running, {10, 20});
  ASSERT_EQ(GetJob(running.id()).state(), v1::RUNNING);
  Capture<std::string> waiting;
  c_->KvGet(running.id(), running.epoch(), "never", clock_.Now() + absl::Seconds(10),
            waiting.Callback());
  ASSERT_OK(c_->CancelJob(running.id(), ""));
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_THAT(*waiting.result, StatusIs(absl::StatusCode::kAborted, HasSubstr("CANCELLED")));
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, running.id(), running.epoch()));
  EXPECT_TRUE(HasAbort(resp, running.id()));
  EXPECT_EQ(StateOf(a.id), v1::IDLE);
  EXPECT_EQ(GetJob(running.id()).reason(), "cancelled by user");
  // Progress reports are told to abort.
  v1::ReportProgressRequest progress;
  progress.set_job_id(running.id());
  progress.set_epoch(running.epoch());
  ASSERT_OK_AND_ASSIGN(auto presp, c_->ReportProgress(progress));
  EXPECT_TRUE(presp.abort());
}

TEST_F(CoordinatorTest, LostWorkerFailsItsJobAndFreesTheOthers) {
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(Beat(b, v1::BUSY, job.id(), job.epoch()));
    c_->Tick();
  }
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("worker w-1 (rank 0) lost"));
  EXPECT_EQ(StateOf(a.id), v1::LOST);
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(b, v1::BUSY, job.id(), job.epoch()));
  EXPECT_TRUE(HasAbort(resp, job.id()));
  EXPECT_EQ(StateOf(b.id), v1::IDLE);
}

TEST_F(CoordinatorTest, RestartedWorkerFailsItsJob) {
  Worker a = Register("a");
  Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  StartRank(a);
  Register("a", "h1", "inc-2");
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("worker w-1 (rank 0) lost: it restarted"));
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(b));
  EXPECT_TRUE(HasAbort(resp, job.id()));
}

TEST_F(CoordinatorTest, RankErrorFailsTheJob) {
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  ASSERT_OK(Result(job, 1, false, "NCCL error: unhandled system error"));
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("rank 1 (worker w-2) failed: NCCL error"));
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, job.id(), job.epoch()));
  EXPECT_TRUE(HasAbort(resp, job.id()));
  // A late result for the ended job is accepted and ignored.
  EXPECT_OK(Result(job, 0, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, ResultChecksRankAndWorker) {
  v1::Job job = StartTwoRankJob();
  v1::ReportResultRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch());
  req.set_rank(5);
  req.set_ok(true);
  EXPECT_THAT(c_->ReportResult(req), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  req.set_rank(0);
  req.set_worker_id("w-42");
  EXPECT_THAT(c_->ReportResult(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("held by")));
  req.set_worker_id(job.members(0).worker_id());
  EXPECT_THAT(c_->ReportResult(req),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before the assignment")));
  req.set_job_id("job-77");
  EXPECT_THAT(c_->ReportResult(req), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CoordinatorTest, WorkerThatNeverStartsTheJobFailsIt) {
  Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  for (int i = 0; i < options_.max_unacknowledged_run_jobs; ++i) {
    ASSERT_OK_AND_ASSIGN(auto resp, Beat(a));
    ASSERT_THAT(resp.directives(), SizeIs(1));
    EXPECT_TRUE(resp.directives(0).has_run_job());
  }
  ASSERT_OK(Beat(a));
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("did not start the job"));
}

TEST_F(CoordinatorTest, WorkerThatDropsItsRankFailsTheJob) {
  Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  StartRank(a);
  ASSERT_OK(Beat(a));  // one IDLE report is tolerated (a race with the result)
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  ASSERT_OK(Beat(a));
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("worker w-1 (rank 0) stopped running the job"));
}

TEST_F(CoordinatorTest, UnassignedJobOnHeartbeatGetsAbort) {
  Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, "job-5", 2));
  ASSERT_TRUE(HasAbort(resp, "job-5"));
  EXPECT_EQ(resp.directives(0).abort_job().epoch(), 2);
}

TEST_F(CoordinatorTest, LayoutMismatchFailsTheJobNamingRankAndBucket) {
  Worker a = Register("a");
  Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  job = GetJob(job.id());
  Capture<Coordinator::AssignmentPtr> waiting;
  c_->GetAssignment(job.id(), job.epoch(), v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(60), waiting.Callback());
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {10, 20, 30})));
  EXPECT_THAT(c_->ReportBuckets(Buckets(job, 1, {10, 21, 30})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 1 (worker w-2) differs from rank 0 at bucket 1")));
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("at bucket 1"));
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_THAT(*waiting.result, StatusIs(absl::StatusCode::kAborted, ::testing::_));
}

TEST_F(CoordinatorTest, InvalidLayoutFailsTheJob) {
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  job = GetJob(job.id());
  auto req = Buckets(job, 0, {10});
  req.mutable_buckets(0)->mutable_parameters(0)->set_dtype("Q4");
  EXPECT_THAT(c_->ReportBuckets(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, ReportLayoutComparesEncodingsThenFields) {
  for (int i = 0; i < 4; ++i) Register(absl::StrCat("w", i));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(4)));
  job = GetJob(job.id());
  auto wire = [&](const v1::ReportBucketsRequest& req) {
    v1::ReportBucketsRequest only;
    *only.mutable_buckets() = req.buckets();
    return only.SerializeAsString();
  };
  auto report = [&](int rank, const std::string& bytes)
      -> absl::StatusOr<v1::ReportBucketsResponse> {
    Capture<v1::ReportBucketsResponse> got;
    c_->ReportLayout(LayoutReport(job, rank, EncodedLayout::FromEncoded(bytes),
                                  ""),
                     absl::InfinitePast(), got.Callback());
    if (!got.result.has_value()) return absl::InternalError("no answer");
    return *got.result;
  };
  const std::string reference = wire(Buckets(job, 0, {10, 20}));
  ASSERT_OK(report(0, reference));
  ASSERT_OK(report(1, reference));  // same bytes
  // Different bytes, same layout (an unknown field): accepted.
  v1::ReportBucketsRequest odd = Buckets(job, 2, {10, 20});
  odd.mutable_buckets(0)->GetReflection()
      ->MutableUnknownFields(odd.mutable_buckets(0))
      ->AddVarint(77, 1);
  ASSERT_NE(wire(odd), reference);
  ASSERT_OK(report(2, wire(odd)));
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  // Bytes that do not parse fail the job.
  EXPECT_THAT(report(3, std::string("\xff\xff\xff", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 3 (worker w-4) sent a bucket layout that "
                                 "does not parse")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, ReportBucketsByFingerprint) {
  for (int i = 0; i < 4; ++i) Register(absl::StrCat("w", i));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(4)));
  job = GetJob(job.id());
  auto by_fingerprint = [&](int rank, const std::vector<int64_t>& sizes) {
    v1::ReportBucketsRequest req = Buckets(job, rank, sizes);
    req.set_layout_fingerprint(shard::LayoutFingerprint(req.buckets()));
    req.clear_buckets();
    return c_->ReportBuckets(req);
  };
  // Nobody has sent the layout yet: rank 0 is asked for it.
  ASSERT_OK_AND_ASSIGN(v1::ReportBucketsResponse r0, by_fingerprint(0, {10, 20}));
  EXPECT_TRUE(r0.send_layout());
  ASSERT_OK_AND_ASSIGN(r0, c_->ReportBuckets(Buckets(job, 0, {10, 20})));
  EXPECT_FALSE(r0.send_layout());
  // The same layout by fingerprint: accepted.
  ASSERT_OK_AND_ASSIGN(v1::ReportBucketsResponse r1, by_fingerprint(1, {10, 20}));
  EXPECT_FALSE(r1.send_layout());
  // A wrong length is refused without failing the job.
  v1::ReportBucketsRequest short_fp = Buckets(job, 2, {10, 20});
  short_fp.clear_buckets();
  short_fp.set_layout_fingerprint("abc");
  EXPECT_THAT(c_->ReportBuckets(short_fp),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layout_fingerprint: must be 32 bytes")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  // A different layout's fingerprint is not taken on trust: send_layout, and
  // the full report then fails the job naming the rank and bucket.
  ASSERT_OK_AND_ASSIGN(v1::ReportBucketsResponse r2, by_fingerprint(2, {10, 21}));
  EXPECT_TRUE(r2.send_layout());
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  EXPECT_THAT(c_->ReportBuckets(Buckets(job, 2, {10, 21})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 2 (worker w-3) differs from rank 0 at bucket 1")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

// Ranks that report their fingerprint before anyone sent the layout wait for
// it; a wrong fingerprint is then asked for the layout, and a wait that runs
// out asks for it too.
TEST_F(CoordinatorTest, FingerprintReportsWaitForTheFirstFullLayout) {
  for (int i = 0; i < 4; ++i) Register(absl::StrCat("w", i));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(4)));
  job = GetJob(job.id());
  auto park = [&](int rank, const std::vector<int64_t>& sizes,
                  absl::Duration wait, Capture<v1::ReportBucketsResponse>* got) {
    v1::ReportBucketsRequest req = Buckets(job, rank, sizes);
    c_->ReportLayout(LayoutReport(job, rank, EncodedLayout(),
                                  shard::LayoutFingerprint(req.buckets())),
                     clock_.Now() + wait, got->Callback());
  };
  Capture<v1::ReportBucketsResponse> same, other, late;
  park(1, {10, 20}, absl::Seconds(10), &same);
  park(2, {10, 99}, absl::Seconds(10), &other);
  park(3, {10, 20}, absl::Seconds(1), &late);
  EXPECT_FALSE(same.result.has_value());
  EXPECT_FALSE(other.result.has_value());
  // Rank 3's wait runs out: it is asked for the layout.
  clock_.Advance(absl::Seconds(2));
  c_->Tick();
  ASSERT_TRUE(late.result.has_value());
  ASSERT_OK(*late.result);
  EXPECT_TRUE((*late.result)->send_layout());
  EXPECT_FALSE(same.result.has_value());
  // Rank 0's full report answers the other two.
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {10, 20})));
  ASSERT_TRUE(same.result.has_value());
  ASSERT_OK(*same.result);
  EXPECT_FALSE((*same.result)->send_layout());
  ASSERT_TRUE(other.result.has_value());
  ASSERT_OK(*other.result);
  EXPECT_TRUE((*other.result)->send_layout());
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  // Ranks 2 and 3 report: rank 3 by fingerprint now, rank 2 in full.
  Capture<v1::ReportBucketsResponse> now;
  park(3, {10, 20}, absl::Seconds(1), &now);
  ASSERT_TRUE(now.result.has_value());
  ASSERT_OK(*now.result);
  EXPECT_FALSE((*now.result)->send_layout());
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 2, {10, 20})));
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, ParkedFingerprintReportIsAbortedWhenTheJobEnds) {
  v1::Job job = StartTwoRankJob();
  Capture<v1::ReportBucketsResponse> parked;
  v1::ReportBucketsRequest req = Buckets(job, 1, {10});
  c_->ReportLayout(LayoutReport(job, 1, EncodedLayout(),
                                shard::LayoutFingerprint(req.buckets())),
                   clock_.Now() + absl::Seconds(10), parked.Callback());
  EXPECT_FALSE(parked.result.has_value());
  ASSERT_OK(c_->CancelJob(job.id(), "test"));
  ASSERT_TRUE(parked.result.has_value());
  EXPECT_THAT(*parked.result, StatusIs(absl::StatusCode::kAborted,
                                       HasSubstr("CANCELLED")));
}

TEST_F(CoordinatorTest, FingerprintReportsCountTowardsTheAssignment) {
  v1::Job job = StartTwoRankJob();
  Capture<Coordinator::AssignmentPtr> owners;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_OWNERS,
                    clock_.Now() + absl::Seconds(30), owners.Callback());
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {100, 300, 200})));
  v1::ReportBucketsRequest req = Buckets(job, 1, {100, 300, 200});
  req.set_layout_fingerprint(shard::LayoutFingerprint(req.buckets()));
  req.clear_buckets();
  ASSERT_OK(c_->ReportBuckets(req));
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  // The parked OWNERS waiter and a later one share the owners view.
  ASSERT_TRUE(owners.result.has_value());
  ASSERT_OK(*owners.result);
  const v1::ShardAssignment& view = ***owners.result;
  ASSERT_OK_AND_ASSIGN(v1::ShardAssignment full, c_->GetShardAssignment(job.id()));
  EXPECT_EQ(view.SerializeAsString(), shard::OwnersView(full).SerializeAsString());
  EXPECT_THAT(view.ranks(), SizeIs(0));
  Capture<Coordinator::AssignmentPtr> later;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_OWNERS,
                    clock_.Now() + absl::Seconds(1), later.Callback());
  ASSERT_TRUE(later.result.has_value());
  ASSERT_OK(*later.result);
  EXPECT_EQ(**later.result, **owners.result);  // the same shared message
  Capture<Coordinator::AssignmentPtr> unspecified;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_UNSPECIFIED,
                    clock_.Now() + absl::Seconds(1), unspecified.Callback());
  ASSERT_TRUE(unspecified.result.has_value());
  ASSERT_OK(*unspecified.result);
  EXPECT_EQ((**unspecified.result)->SerializeAsString(), full.SerializeAsString());
  Capture<Coordinator::AssignmentPtr> bad;
  c_->GetAssignment(job.id(), 1, static_cast<v1::AssignmentView>(9),
                    clock_.Now() + absl::Seconds(1), bad.Callback());
  ASSERT_TRUE(bad.result.has_value());
  EXPECT_THAT(*bad.result, StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("view: unknown assignment view 9")));
}

TEST_F(CoordinatorTest, ReportBucketsBadInput) {
  v1::Job job = StartTwoRankJob();
  auto req = Buckets(job, 0, {10});
  req.set_job_id("job-404");
  EXPECT_THAT(c_->ReportBuckets(req), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  req = Buckets(job, 0, {10});
  req.set_epoch(job.epoch() + 1);
  EXPECT_THAT(c_->ReportBuckets(req),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unknown")));
  req = Buckets(job, 0, {10});
  req.set_rank(2);
  EXPECT_THAT(c_->ReportBuckets(req), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  req = Buckets(job, 0, {10});
  req.set_worker_id(job.members(1).worker_id());
  EXPECT_THAT(c_->ReportBuckets(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("held by")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);  // none of these fail it
}

TEST_F(CoordinatorTest, KvWaitsAndErrors) {
  options_.worker_timeout = absl::Hours(1);  // the test moves time a lot
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  job = GetJob(job.id());
  const absl::Time later = clock_.Now() + absl::Seconds(2);
  // A blocked get is answered by the put.
  Capture<std::string> first;
  Capture<std::string> second;
  c_->KvGet(job.id(), 1, "addr", later, first.Callback());
  c_->KvGet(job.id(), 1, "addr", later, second.Callback());
  EXPECT_FALSE(first.result.has_value());
  v1::KvPutRequest put;
  put.set_job_id(job.id());
  put.set_epoch(1);
  put.set_key("addr");
  put.set_value("10.0.0.1:1234");
  ASSERT_OK(c_->KvPut(put));
  ASSERT_TRUE(first.result.has_value() && second.result.has_value());
  EXPECT_EQ(**first.result, "10.0.0.1:1234");
  EXPECT_EQ(**second.result, "10.0.0.1:1234");
  // A get that times out, on the fake clock.
  Capture<std::string> timeout;
  c_->KvGet(job.id(), 1, "missing", later, timeout.Callback());
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  EXPECT_FALSE(timeout.result.has_value());
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  ASSERT_TRUE(timeout.result.has_value());
  EXPECT_THAT(*timeout.result, StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  // A deadline in the past answers at once.
  Capture<std::string> past;
  c_->KvGet(job.id(), 1, "missing", clock_.Now(), past.Callback());
  ASSERT_TRUE(past.result.has_value());
  EXPECT_THAT(*past.result, StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  // Waits are capped at max_wait.
  Capture<std::string> capped;
  c_->KvGet(job.id(), 1, "missing", absl::InfiniteFuture(), capped.Callback());
  clock_.Advance(options_.max_wait);
  c_->Tick();
  ASSERT_TRUE(capped.result.has_value());
  // A cancelled wait never calls back.
  Capture<std::string> cancelled;
  auto id = c_->KvGet(job.id(), 1, "later", clock_.Now() + absl::Seconds(5),
                      cancelled.Callback());
  EXPECT_NE(id, 0u);
  c_->CancelWait(id);
  put.set_key("later");
  ASSERT_OK(c_->KvPut(put));
  EXPECT_FALSE(cancelled.result.has_value());
  c_->CancelWait(id);  // twice is fine

  // Bad input.
  put.set_key("");
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key")));
  put.set_key(std::string(513, 'k'));
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key")));
  put.set_key("k");
  put.set_value(std::string((1 << 20) + 1, 'v'));
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("value")));
  put.set_value("v");
  put.set_epoch(0);
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
  put.set_epoch(1);
  put.set_job_id("job-3");
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  Capture<std::string> bad;
  c_->KvGet(job.id(), 1, "", later, bad.Callback());
  EXPECT_THAT(*bad.result, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  Capture<std::string> stale;
  c_->KvGet(job.id(), 7, "k", later, stale.Callback());
  EXPECT_THAT(*stale.result, StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

TEST_F(CoordinatorTest, KvStoreIsCappedPerJob) {
  options_.max_kv_keys_per_job = 2;
  options_.max_kv_bytes_per_job = 100;
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  v1::KvPutRequest put;
  put.set_job_id(job.id());
  put.set_epoch(1);
  put.set_key("a");
  put.set_value(std::string(60, 'x'));
  ASSERT_OK(c_->KvPut(put));
  put.set_key("b");
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("bytes")));
  put.set_value("y");
  ASSERT_OK(c_->KvPut(put));
  put.set_key("c");
  EXPECT_THAT(c_->KvPut(put), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("keys")));
  put.set_key("a");  // overwriting stays within the caps
  ASSERT_OK(c_->KvPut(put));
}

TEST_F(CoordinatorTest, KvStoresAreCappedTogether) {
  options_.max_kv_bytes_total = 100;
  Open(":memory:");
  Register("a");
  Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job j1, c_->SubmitJob(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job j2, c_->SubmitJob(Spec(1)));
  v1::KvPutRequest put;
  put.set_job_id(j1.id());
  put.set_epoch(1);
  put.set_key("k");
  put.set_value(std::string(70, 'x'));
  ASSERT_OK(c_->KvPut(put));
  put.set_job_id(j2.id());
  EXPECT_THAT(c_->KvPut(put),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("all jobs")));
  ASSERT_OK(c_->CancelJob(j1.id(), ""));  // frees j1's store
  ASSERT_OK(c_->KvPut(put));
}

TEST_F(CoordinatorTest, JobsKeptAreCapped) {
  options_.max_jobs = 2;
  Open(":memory:");
  ASSERT_OK_AND_ASSIGN(v1::Job j1, c_->SubmitJob(Spec(1)));
  ASSERT_OK(c_->CancelJob(j1.id(), ""));
  ASSERT_OK(c_->SubmitJob(Spec(1)));
  EXPECT_THAT(c_->SubmitJob(Spec(1)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("jobs kept")));
}

TEST_F(CoordinatorTest, UnknownFieldsAreNotStored) {
  v1::JobSpec spec = Spec(1);
  spec.GetReflection()->MutableUnknownFields(&spec)->AddLengthDelimited(
      999, std::string(1000, 'u'));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(spec));
  EXPECT_EQ(GetJob(job.id()).spec().GetReflection()->GetUnknownFields(
                GetJob(job.id()).spec()).field_count(), 0);
}

TEST_F(CoordinatorTest, WaitersAreCapped) {
  options_.max_waiters = 1;
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  Capture<std::string> one, two;
  c_->KvGet(job.id(), 1, "x", clock_.Now() + absl::Seconds(1), one.Callback());
  c_->KvGet(job.id(), 1, "x", clock_.Now() + absl::Seconds(1), two.Callback());
  EXPECT_FALSE(one.result.has_value());
  ASSERT_TRUE(two.result.has_value());
  EXPECT_THAT(*two.result, StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
}

TEST_F(CoordinatorTest, ManyWaitersAreAnsweredOnTheNotifierThread) {
  options_.max_inline_callbacks = 4;
  Open(":memory:");
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  job = GetJob(job.id());
  std::vector<Capture<Coordinator::AssignmentPtr>> waits(50);
  for (auto& w : waits) {
    c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(60), w.Callback());
  }
  PublishLayout(job, {10});
  ASSERT_TRUE(c_->WaitForNotifier(absl::Seconds(30)));
  for (auto& w : waits) {
    ASSERT_TRUE(w.result.has_value());
    EXPECT_OK(*w.result);
  }
}

TEST_F(CoordinatorTest, GetAssignmentErrors) {
  Capture<Coordinator::AssignmentPtr> none;
  c_->GetAssignment("job-1", 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(1), none.Callback());
  EXPECT_THAT(*none.result, StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(c_->GetShardAssignment("job-1"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  ASSERT_OK_AND_ASSIGN(v1::Job queued, c_->SubmitJob(Spec(1)));
  EXPECT_THAT(c_->GetShardAssignment(queued.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("QUEUED")));
  Register("a");
  v1::Job job = GetJob(queued.id());
  ASSERT_EQ(job.epoch(), 1);
  Capture<Coordinator::AssignmentPtr> stale;
  c_->GetAssignment(job.id(), 0, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(1), stale.Callback());
  EXPECT_THAT(*stale.result, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
  Capture<Coordinator::AssignmentPtr> timeout;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(1), timeout.Callback());
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  EXPECT_THAT(*timeout.result,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("0 of 1")));
  PublishLayout(job, {5});
  Capture<Coordinator::AssignmentPtr> now;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now(), now.Callback());
  EXPECT_OK(*now.result);
}

TEST_F(CoordinatorTest, ProgressEventsAreThrottled) {
  Worker a = Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1, 100)));
  job = GetJob(job.id());
  StartRank(a);
  PublishLayout(job, {8});
  const size_t before = Events(job.id()).size();
  v1::ReportProgressRequest req;
  req.set_job_id(job.id());
  req.set_epoch(1);
  req.set_rank(0);
  req.set_worker_id(a.id);
  for (int step = 1; step <= 5; ++step) {
    req.mutable_progress()->set_step(step);
    ASSERT_OK(c_->ReportProgress(req));
  }
  EXPECT_EQ(GetJob(job.id()).progress().step(), 5);
  EXPECT_EQ(Events(job.id()).size(), before + 1);  // only step 1 so far
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  auto events = Events(job.id());
  ASSERT_EQ(events.size(), before + 2);
  EXPECT_EQ(events.back().progress().step(), 5);
  req.mutable_progress()->set_step(-1);
  EXPECT_THAT(c_->ReportProgress(req), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  req.mutable_progress()->set_step(6);
  req.set_rank(3);
  EXPECT_THAT(c_->ReportProgress(req), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  req.set_job_id("job-55");
  EXPECT_THAT(c_->ReportProgress(req), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CoordinatorTest, WaitForEvents) {
  StatusCapture missing;
  c_->WaitForEvents("job-1", 0, clock_.Now() + absl::Seconds(1), missing.Callback());
  EXPECT_THAT(*missing.result, StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  StatusCapture ready;
  c_->WaitForEvents(job.id(), 0, clock_.Now() + absl::Seconds(1), ready.Callback());
  EXPECT_OK(*ready.result);
  StatusCapture wait;
  c_->WaitForEvents(job.id(), 1, clock_.Now() + absl::Seconds(5), wait.Callback());
  EXPECT_FALSE(wait.result.has_value());
  Register("a");  // starts the job: a new event
  ASSERT_TRUE(wait.result.has_value());
  EXPECT_OK(*wait.result);
  StatusCapture timeout;
  c_->WaitForEvents(job.id(), 2, clock_.Now() + absl::Seconds(5), timeout.Callback());
  clock_.Advance(absl::Seconds(5));
  c_->Tick();
  EXPECT_THAT(*timeout.result, StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  EXPECT_THAT(c_->GetEvents(job.id(), -1, 10), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  ASSERT_OK_AND_ASSIGN(auto batch, c_->GetEvents(job.id(), 1, 10));
  ASSERT_THAT(batch.events, SizeIs(1));
  EXPECT_EQ(batch.events[0].sequence(), 2);
  EXPECT_FALSE(batch.terminal);
}

TEST_F(CoordinatorTest, ListJobsFiltersAndPages) {
  for (int i = 0; i < 5; ++i) ASSERT_OK(c_->SubmitJob(Spec(1)));
  ASSERT_OK(c_->CancelJob("job-2", ""));
  ASSERT_OK(c_->CancelJob("job-4", ""));
  ASSERT_OK_AND_ASSIGN(auto all, c_->ListJobs({}, 0, ""));
  ASSERT_THAT(all.jobs, SizeIs(5));
  EXPECT_EQ(all.jobs[0].id(), "job-5");  // newest first
  EXPECT_EQ(all.next_page_token, "");
  // Pages of 2: 5 4 | 3 2 | 1, and a job submitted meanwhile is newer than
  // the first page, so it does not show up on later ones.
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    ASSERT_OK_AND_ASSIGN(auto page, c_->ListJobs({}, 2, token));
    EXPECT_LE(page.jobs.size(), 2u);
    for (const v1::Job& j : page.jobs) seen.push_back(j.id());
    token = page.next_page_token;
    if (++pages == 1) ASSERT_OK(c_->SubmitJob(Spec(1)));
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_THAT(seen, ElementsAre("job-5", "job-4", "job-3", "job-2", "job-1"));
  // A filter pages too, and its token is refused with another filter.
  ASSERT_OK_AND_ASSIGN(auto c1, c_->ListJobs({v1::CANCELLED}, 1, ""));
  ASSERT_THAT(c1.jobs, SizeIs(1));
  EXPECT_EQ(c1.jobs[0].id(), "job-4");
  ASSERT_FALSE(c1.next_page_token.empty());
  // The same states in another order and repeated are the same filter.
  ASSERT_OK_AND_ASSIGN(auto c2, c_->ListJobs({v1::CANCELLED, v1::CANCELLED}, 1,
                                             c1.next_page_token));
  ASSERT_THAT(c2.jobs, SizeIs(1));
  EXPECT_EQ(c2.jobs[0].id(), "job-2");
  EXPECT_EQ(c2.next_page_token, "");
  EXPECT_THAT(c_->ListJobs({v1::QUEUED}, 1, c1.next_page_token),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token: made with other filters")));
  EXPECT_THAT(c_->ListJobs({}, 0, "bogus"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token: not a page token")));
  EXPECT_THAT(c_->ListJobs({}, -1, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("page_size")));
  EXPECT_THAT(c_->ListJobs({static_cast<v1::JobState>(77)}, 0, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("states")));
  // A byte cap ends a page early (but never empty).
  ASSERT_OK_AND_ASSIGN(auto small, c_->ListJobs({}, 0, "", 1));
  ASSERT_THAT(small.jobs, SizeIs(1));
  EXPECT_FALSE(small.next_page_token.empty());
  EXPECT_THAT(c_->GetJob("job-0"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(c_->GetJob("job-01"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CoordinatorTest, ListWorkersPagesInIdOrder) {
  for (int i = 0; i < 5; ++i) Register(absl::StrCat("pod-", i));
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    ASSERT_OK_AND_ASSIGN(auto page, c_->ListWorkers(false, 2, token));
    for (const v1::WorkerInfo& w : page.workers) seen.push_back(w.id());
    token = page.next_page_token;
    // Registered while paging: a new, larger id, on a later page.
    if (++pages == 1) Register("pod-late");
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_THAT(seen, ElementsAre("w-1", "w-2", "w-3", "w-4", "w-5", "w-6"));
  ASSERT_OK_AND_ASSIGN(auto first, c_->ListWorkers(false, 4, ""));
  EXPECT_THAT(c_->ListWorkers(true, 4, first.next_page_token),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token: made with other filters")));
  EXPECT_THAT(c_->ListWorkers(false, -5, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_size: must be >= 0, got -5")));
  ASSERT_OK_AND_ASSIGN(auto capped, c_->ListWorkers(false, 1 << 20, ""));
  EXPECT_THAT(capped.workers, SizeIs(6));
}

// ---- Restart ----

TEST_F(CoordinatorTest, RestartKeepsEverythingAndRunningJobsContinue) {
  const std::string path = TempPath("restart.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job queued, c_->SubmitJob(Spec(5)));
  job = GetJob(job.id());
  StartRank(a);
  StartRank(b);
  PublishLayout(job, {4, 4});
  const auto events_before = Events(job.id());
  ASSERT_OK_AND_ASSIGN(auto assignment_before, c_->GetShardAssignment(job.id()));

  clock_.Advance(absl::Seconds(3));
  Open(path);  // "kill and restart"
  EXPECT_EQ(GetJob(queued.id()).state(), v1::QUEUED);
  v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::RUNNING);
  EXPECT_EQ(after.epoch(), 1);
  EXPECT_EQ(Events(job.id()).size(), events_before.size());
  ASSERT_OK_AND_ASSIGN(auto assignment_after, c_->GetShardAssignment(job.id()));
  EXPECT_EQ(assignment_after.SerializeAsString(), assignment_before.SerializeAsString());
  // Same incarnation: heartbeats are accepted without re-registering.
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(a, v1::BUSY, job.id(), 1));
  EXPECT_THAT(resp.directives(), SizeIs(0));
  EXPECT_EQ(Register("b").id, b.id);  // or they register again: same id
  ASSERT_OK(Beat(b, v1::BUSY, job.id(), 1));
  clock_.Advance(absl::Seconds(20));
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
  ASSERT_OK(Beat(b, v1::BUSY, job.id(), 1));
  c_->Tick();
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  ASSERT_OK(Result(after, 0, true));
  ASSERT_OK(Result(after, 1, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
  // New ids continue after the stored ones.
  EXPECT_EQ(Register("c").id, "w-3");
  ASSERT_OK_AND_ASSIGN(v1::Job next, c_->SubmitJob(Spec(1)));
  EXPECT_EQ(next.id(), "job-3");
}

TEST_F(CoordinatorTest, ReportResultAsyncAnswersOnceTheResultIsDurable) {
  const std::string path = TempPath("async-result.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {4, 4});
  job = GetJob(job.id());
  auto request = [&](int rank) { return ResultRequest(job, rank, true); };
  // What a second connection to the database sees when `done` runs.
  struct Seen {
    std::optional<absl::Status> status;
    std::set<int> finished;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  };
  const int64_t job_num = 1;
  auto capture = [&](Seen* seen) {
    return [&path, seen, job_num](absl::Status status) {
      seen->status = status;
      auto store = StateStore::Open(path);
      ASSERT_OK(store);
      auto snapshot = (*store)->Load();
      ASSERT_OK(snapshot);
      seen->finished = snapshot->finished_ranks[job_num];
      seen->state = snapshot->jobs[job_num].state();
    };
  };
  Seen bad, first, retry, second;
  v1::ReportResultRequest wrong = request(1);
  wrong.set_rank(7);
  c_->ReportResultAsync(wrong, capture(&bad));
  c_->ReportResultAsync(request(0), capture(&first));
  c_->ReportResultAsync(request(0), capture(&retry));
  c_->ReportResultAsync(request(1), capture(&second));
  ASSERT_TRUE(c_->WaitForNotifier(absl::Seconds(30)));
  ASSERT_TRUE(first.status.has_value());
  EXPECT_OK(*first.status);
  EXPECT_THAT(first.finished, ::testing::Contains(0));
  ASSERT_TRUE(second.status.has_value());
  EXPECT_OK(*second.status);
  EXPECT_EQ(second.state, v1::SUCCEEDED);
  ASSERT_TRUE(retry.status.has_value());
  EXPECT_OK(*retry.status);  // a retry of rank 0, already finished
  ASSERT_TRUE(bad.status.has_value());
  EXPECT_THAT(*bad.status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
  Open(path);  // "kill and restart"
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorTest, HeartbeatWithoutDirectivesDoesNotWaitForOtherWrites) {
  const std::string path = TempPath("heartbeat-no-wait.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {4, 4});
  job = GetJob(job.id());
  Worker idle = Register("c");
  ASSERT_OK(Beat(idle));  // confirmed: its next heartbeat writes nothing
  // Another connection holds the write lock: the result's write waits for
  // it (SQLite's busy timeout, 5 s) on the notifier thread.
  ASSERT_OK_AND_ASSIGN(auto other, SqliteDatabase::Open(path));
  ASSERT_OK(other->Exec("BEGIN IMMEDIATE"));
  absl::Notification answered;
  std::optional<absl::Status> result;
  c_->ReportResultAsync(ResultRequest(job, 0, true), [&](absl::Status s) {
    result = s;
    answered.Notify();
  });
  // Answered while the result is still unwritten; had it waited for that
  // write, the write would have run into the busy timeout and failed.
  ASSERT_OK_AND_ASSIGN(v1::HeartbeatResponse resp, Beat(idle));
  EXPECT_THAT(resp.directives(), SizeIs(0));
  EXPECT_FALSE(answered.HasBeenNotified());
  ASSERT_OK(other->Exec("COMMIT"));
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_OK(*result);
}

TEST_F(CoordinatorTest, RestartRestartsAStartingJobWithANewEpoch) {
  const std::string path = TempPath("restart-starting.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  StartRank(a);
  StartRank(b);
  Open(path);
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
  EXPECT_EQ(GetJob(job.id()).epoch(), 1);  // b is not back yet
  ASSERT_OK_AND_ASSIGN(auto resp, Beat(b, v1::BUSY, job.id(), 1));
  v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.epoch(), 2);
  EXPECT_THAT(after.reason(), HasSubstr("coordinator restarted"));
  bool run = false;
  for (const auto& d : resp.directives()) run |= d.has_run_job() && d.run_job().epoch() == 2;
  EXPECT_TRUE(run);
  EXPECT_TRUE(HasAbort(resp, job.id()));  // the old epoch
}

TEST_F(CoordinatorTest, RestartFailsAJobWhoseWorkersDoNotComeBack) {
  const std::string path = TempPath("restart-lost.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {1, 2});
  Open(path);
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
    c_->Tick();
    ASSERT_EQ(GetJob(job.id()).state(), v1::RUNNING) << i;  // grace: 10 s
  }
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
  c_->Tick();
  v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::FAILED);
  EXPECT_THAT(after.reason(), HasSubstr("worker w-2 (rank 1) lost: not back within"));
}

TEST_F(CoordinatorTest, RestartRestartsARunningJobWhoseRankStopped) {
  const std::string path = TempPath("restart-idle.db");
  Open(path);
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {1, 2});
  Open(path);
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), 1));
  ASSERT_OK(Beat(b));  // b gave up while the coordinator was away
  v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.epoch(), 2);
  Capture<Coordinator::AssignmentPtr> stale;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(1), stale.Callback());
  EXPECT_THAT(*stale.result, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
