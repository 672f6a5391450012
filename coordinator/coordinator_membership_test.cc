// Coordinator facade tests: registration, heartbeats and their directives, loss, drain, the worker listing.
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

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

TEST_F(CoordinatorTest, HeartbeatWithoutDirectivesDoesNotWaitForOtherWrites) {
  FaultStateStore* store = OpenWithFaults(TempPath("heartbeat-no-wait.db"));
  ASSERT_NE(store, nullptr);
  Worker a = Register("a");
  Worker b = Register("b");
  v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {4, 4});
  job = GetJob(job.id());
  Worker idle = Register("c");
  ASSERT_OK(Beat(idle));  // confirmed: its next heartbeat writes nothing
  // The disk is slow: the result's write waits on the notifier thread.
  store->Hold();
  absl::Notification answered;
  std::optional<absl::Status> result;
  c_->ReportResultAsync(ResultRequest(job, 0, true), [&](absl::Status s) {
    result = s;
    answered.Notify();
  });
  // Answered while the result is still unwritten (had the heartbeat waited
  // for that write, it would wait here for ever).
  ASSERT_OK_AND_ASSIGN(v1::HeartbeatResponse resp, Beat(idle));
  EXPECT_THAT(resp.directives(), SizeIs(0));
  EXPECT_FALSE(answered.HasBeenNotified());
  store->Release();
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_OK(*result);
}

// A job's directives say where each rank sits on its host: ranks are
// placed node by node, and LOCAL_RANK counts within a node in rank order.
TEST_F(CoordinatorTest, RunJobCarriesTheLocalPlacement) {
  // Node n1 runs a --local_ranks 2 supervisor, n2 a plain worker; they
  // register interleaved.
  Worker n1_0 = Register("n1:0", "n1");
  Worker n2 = Register("n2", "n2");
  Worker n1_1 = Register("n1:1", "n1");
  ASSERT_OK(c_->SubmitJob(Spec(3)).status());
  const v1::RunJobDirective r0 = StartRank(n1_0);
  const v1::RunJobDirective r1 = StartRank(n1_1);
  const v1::RunJobDirective r2 = StartRank(n2);
  EXPECT_EQ(r0.rank(), 0);
  EXPECT_EQ(r1.rank(), 1);
  EXPECT_EQ(r2.rank(), 2);
  EXPECT_EQ(r0.local_rank(), 0);
  EXPECT_EQ(r1.local_rank(), 1);
  EXPECT_EQ(r2.local_rank(), 0);
  EXPECT_EQ(r0.local_world_size(), 2);
  EXPECT_EQ(r1.local_world_size(), 2);
  EXPECT_EQ(r2.local_world_size(), 1);
}

// A worker principal P may act as P and as its local ranks "P:<i>", and as
// nothing else (security/worker_principal.h).
TEST_F(CoordinatorTest, WorkerCredentialsCoverTheirLocalRanks) {
  Worker p1 = Register("p:1", "n1");
  Worker q1 = Register("q:1", "n2");
  Worker p = Register("p", "n3");
  EXPECT_OK(c_->CheckWorkerIsNamed(p1.id, "p"));
  EXPECT_OK(c_->CheckWorkerIsNamed(p.id, "p"));
  EXPECT_THAT(c_->CheckWorkerIsNamed(q1.id, "p"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("may act only as that worker")));
  EXPECT_THAT(c_->CheckWorkerIsNamed(p1.id, "q"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  v1::HeartbeatRequest beat;
  beat.set_worker_id(p1.id);
  beat.set_incarnation(p1.incarnation);
  beat.set_state(v1::IDLE);
  EXPECT_OK(c_->HeartbeatShared(beat, std::string("p")).status());
  EXPECT_THAT(c_->HeartbeatShared(beat, std::string("q")).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  // The rendezvous store of a job: for any of the principal's workers that
  // holds one of its ranks.
  ASSERT_OK(Beat(q1).status());
  ASSERT_OK(Beat(p).status());
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  job = GetJob(job.id());
  ASSERT_EQ(job.members_size(), 1);
  const std::string holder = job.members(0).worker_id();
  const std::string principal = holder == q1.id ? "q" : "p";
  const std::string other = principal == "p" ? "q" : "p";
  EXPECT_OK(c_->CheckHoldsRank(principal, job.id()));
  EXPECT_THAT(c_->CheckHoldsRank(other, job.id()),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("holds no rank of")));
  EXPECT_THAT(c_->CheckHoldsRank("nobody", job.id()),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("is no registered worker")));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
