// Restart after a failure that is not the job's own, and blame (see
// "Restart after a failure" and "Blame" in coordinator.h), on a FakeClock.
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class CoordinatorRestartTest : public CoordinatorTest {
 protected:
  // A two-rank job on a (w-1) and b (w-2), both ranks started and RUNNING.
  v1::Job StartRunning(v1::JobSpec spec) {
    auto submitted = c_->SubmitJob(spec);
    EXPECT_OK(submitted);
    if (!submitted.ok()) return v1::Job();
    v1::Job job = GetJob(submitted->id());
    for (const v1::JobMember& m : job.members()) StartRank(ById(m.worker_id()));
    PublishLayout(job, {10});
    return GetJob(job.id());
  }

  Worker ById(const std::string& id) {
    for (const Worker& w : workers_) {
      if (w.id == id) return w;
    }
    ADD_FAILURE() << "no worker " << id;
    return {};
  }

  Worker Add(const std::string& name) {
    workers_.push_back(Register(name));
    return workers_.back();
  }

  // Lets `lost` miss its heartbeats until it is declared lost, the others
  // beating on.
  void LoseByTimeout(const Worker& lost) {
    for (int i = 0; i < 6; ++i) {
      clock_.Advance(absl::Seconds(1));
      for (const Worker& w : workers_) {
        if (w.id != lost.id && StateOf(w.id) != v1::LOST) BeatAsAssigned(w);
      }
      c_->Tick();
    }
    ASSERT_EQ(StateOf(lost.id), v1::LOST);
  }

  // A heartbeat reporting what `w` is assigned: BUSY with its job's epoch,
  // or IDLE.
  void BeatAsAssigned(const Worker& w) {
    auto info = c_->GetWorker(w.id);
    ASSERT_OK(info);
    if (info->state() == v1::BUSY) {
      const v1::Job job = GetJob(info->job_id());
      ASSERT_OK(Beat(w, v1::BUSY, job.id(), job.epoch()));
    } else {
      ASSERT_OK(Beat(w));
    }
  }

  // Rank `rank` reports failure with `cause` (and `blamed_rank` if >= 0).
  absl::Status Fail(const v1::Job& job, int rank, const std::string& error,
                    v1::FailureCause cause, int blamed_rank = -1) {
    v1::ReportResultRequest req = ResultRequest(job, rank, false, error);
    req.set_cause(cause);
    if (blamed_rank >= 0) req.set_blamed_rank(blamed_rank);
    return c_->ReportResult(req);
  }

  std::vector<v1::JobEvent::Restart> Restarts(const std::string& job_id) {
    std::vector<v1::JobEvent::Restart> out;
    for (const v1::JobEvent& e : Events(job_id)) {
      if (e.has_restart()) out.push_back(e.restart());
    }
    return out;
  }

  static v1::JobSpec Restartable(int max_restarts, int min_world_size = 0) {
    v1::JobSpec spec = Spec(2);
    spec.set_max_restarts(max_restarts);
    spec.set_min_world_size(min_world_size);
    return spec;
  }

  // The first heartbeat reply of `w` after a restart: AbortJob for the old
  // epoch before RunJob for the new one.
  v1::RunJobDirective ExpectAbortThenRunJob(const Worker& w, const v1::Job& old) {
    auto resp = Beat(w, v1::BUSY, old.id(), old.epoch());
    EXPECT_OK(resp);
    v1::RunJobDirective run;
    if (!resp.ok()) return run;
    EXPECT_TRUE(HasAbort(*resp, old.id()));
    EXPECT_TRUE(resp->directives(0).has_abort_job());
    EXPECT_EQ(resp->directives(0).abort_job().epoch(), old.epoch());
    for (const auto& d : resp->directives()) {
      if (d.has_run_job()) run = d.run_job();
    }
    return run;
  }

  std::vector<Worker> workers_;
};

TEST_F(CoordinatorRestartTest, LostWorkerRestartsOnSurvivorAndSpare) {
  Worker a = Add("a"), b = Add("b"), c = Add("c");
  const v1::Job job = StartRunning(Restartable(3));
  ASSERT_EQ(job.members(1).worker_id(), b.id);
  LoseByTimeout(b);

  const v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.epoch(), job.epoch() + 1);
  EXPECT_EQ(after.restarts(), 1);
  EXPECT_THAT(after.reason(),
              StartsWith("restart 1 of 3 after: worker w-2 (rank 1) lost: "));
  ASSERT_EQ(after.members_size(), 2);
  EXPECT_EQ(after.members(0).worker_id(), a.id);
  EXPECT_EQ(after.members(1).worker_id(), c.id);
  const auto restarts = Restarts(job.id());
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0].restart(), 1);
  EXPECT_EQ(restarts[0].epoch(), after.epoch());
  EXPECT_EQ(restarts[0].world_size(), 2);
  EXPECT_THAT(restarts[0].cause(), StartsWith("worker w-2 (rank 1) lost: "));
  EXPECT_FALSE(restarts[0].has_resumed_from());

  const v1::RunJobDirective run = ExpectAbortThenRunJob(a, job);
  EXPECT_EQ(run.epoch(), after.epoch());
  EXPECT_EQ(run.rank(), 0);
  EXPECT_EQ(run.world_size(), 2);
  EXPECT_EQ(run.restart_count(), 1);

  // The new epoch runs to the end.
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), after.epoch()));
  StartRank(c);
  PublishLayout(after, {10});
  ASSERT_OK(Result(after, 0, true));
  ASSERT_OK(Result(after, 1, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
  EXPECT_EQ(GetJob(job.id()).restarts(), 1);
}

TEST_F(CoordinatorRestartTest, SmallerWorldDownToMinWorldSize) {
  Worker a = Add("a"), b = Add("b");
  const v1::Job job = StartRunning(Restartable(1, /*min_world_size=*/1));
  LoseByTimeout(b);
  const v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  ASSERT_EQ(after.members_size(), 1);
  EXPECT_EQ(after.members(0).worker_id(), a.id);
  ASSERT_EQ(Restarts(job.id()).size(), 1u);
  EXPECT_EQ(Restarts(job.id())[0].world_size(), 1);
  const v1::RunJobDirective run = ExpectAbortThenRunJob(a, job);
  EXPECT_EQ(run.world_size(), 1);
  ASSERT_OK(Beat(a, v1::BUSY, job.id(), after.epoch()));
  // The layout barrier and the assignment are sized to the smaller world.
  PublishLayout(after, {10});
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  ASSERT_OK(Result(after, 0, true));
  EXPECT_EQ(GetJob(job.id()).state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorRestartTest, WaitsAtTheHeadThenPlacedWhenWorkersCome) {
  Worker a = Add("a"), b = Add("b");
  const v1::Job job = StartRunning(Restartable(2));
  // A later job queues behind; the restart must not lose its place to it.
  ASSERT_OK_AND_ASSIGN(const v1::Job later, c_->SubmitJob(Spec(1)));
  LoseByTimeout(b);
  v1::Job waiting = GetJob(job.id());
  EXPECT_EQ(waiting.state(), v1::QUEUED);
  EXPECT_EQ(waiting.restarts(), 1);
  EXPECT_EQ(waiting.members_size(), 0);
  // b is LOST: the pool alone cannot run it until a worker comes.
  EXPECT_THAT(waiting.reason(),
              HasSubstr("; needs 2 workers (min_world_size); 1 is registered "
                        "and not draining"));
  EXPECT_TRUE(waiting.has_start_time());
  // a is still RELEASING the restarted job's old epoch: not for `later`.
  EXPECT_EQ(GetJob(later.id()).state(), v1::QUEUED);
  EXPECT_TRUE(Restarts(job.id()).empty());

  Worker c = Add("c");
  const v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.restarts(), 1);
  EXPECT_THAT(after.reason(),
              StartsWith("restart 1 of 2 after: worker w-2 (rank 1) lost: "));
  EXPECT_THAT(after.reason(), Not(HasSubstr("waiting")));
  EXPECT_EQ(after.start_time().seconds(), waiting.start_time().seconds());
  ASSERT_EQ(after.members_size(), 2);
  EXPECT_EQ(after.members(0).worker_id(), a.id);
  EXPECT_EQ(after.members(1).worker_id(), c.id);
  ASSERT_EQ(Restarts(job.id()).size(), 1u);
  EXPECT_EQ(Restarts(job.id())[0].world_size(), 2);
}

TEST_F(CoordinatorRestartTest, ExhaustedRestartsFailNamingTheCause) {
  Add("a");
  Worker b = Add("b");
  Worker c = Add("c");
  const v1::Job job = StartRunning(Restartable(1));
  LoseByTimeout(b);
  const v1::Job second = GetJob(job.id());
  ASSERT_EQ(second.state(), v1::STARTING);
  ASSERT_EQ(second.members(1).worker_id(), c.id);
  StartRank(c);
  LoseByTimeout(c);
  const v1::Job failed = GetJob(job.id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_EQ(failed.restarts(), 1);
  EXPECT_THAT(failed.reason(), StartsWith("worker w-3 (rank 1) lost: "));
  EXPECT_THAT(failed.reason(), HasSubstr("(no restart left: 1 of 1 used)"));
}

TEST_F(CoordinatorRestartTest, JobCauseIsNotRetried) {
  Add("a");
  Add("b");
  Add("c");
  const v1::Job job = StartRunning(Restartable(3));
  ASSERT_OK(Fail(job, 0, "loss is NaN", v1::FAILURE_CAUSE_JOB));
  const v1::Job failed = GetJob(job.id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_EQ(failed.reason(), "rank 0 (worker w-1) failed: loss is NaN");
  EXPECT_EQ(failed.restarts(), 0);
  // UNSPECIFIED is JOB.
  const v1::Job job2 = StartRunning(Restartable(3));
  ASSERT_OK(Result(job2, 1, false, "bad input"));
  EXPECT_EQ(GetJob(job2.id()).state(), v1::FAILED);
}

TEST_F(CoordinatorRestartTest, WorkerCauseRestartsWithoutThatWorker) {
  Worker a = Add("a");
  Add("b");
  Worker c = Add("c");
  const v1::Job job = StartRunning(Restartable(1));
  ASSERT_OK(Fail(job, 1, "agent draining", v1::FAILURE_CAUSE_WORKER));
  const v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  ASSERT_EQ(after.members_size(), 2);
  EXPECT_EQ(after.members(0).worker_id(), a.id);
  EXPECT_EQ(after.members(1).worker_id(), c.id);
  EXPECT_EQ(Restarts(job.id())[0].cause(),
            "rank 1 (worker w-2) failed: agent draining");
}

TEST_F(CoordinatorRestartTest, ProgramFailureRestartsOnlyWhenAsked) {
  Add("a");
  Add("b");
  v1::JobSpec spec;
  spec.set_name("train");
  spec.set_world_size(2);
  spec.mutable_program()->add_argv("/bin/false");
  spec.set_max_restarts(1);
  const v1::Job plain = StartRunning(spec);
  ASSERT_OK(Result(plain, 0, false, "exit status 1"));
  EXPECT_EQ(GetJob(plain.id()).state(), v1::FAILED);
  // Rank 1, told to abort, stops; only then is its worker free again.
  ASSERT_OK(Result(plain, 1, false, "aborted"));

  spec.set_restart_on_program_failure(true);
  const v1::Job retried = StartRunning(spec);
  ASSERT_OK(Result(retried, 0, false, "exit status 1"));
  const v1::Job after = GetJob(retried.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.reason(),
            "restart 1 of 1 after: rank 0 (worker w-1) failed: exit status 1");
}

TEST_F(CoordinatorRestartTest, PeerFailureBlamesAWorkerLostInTheWindow) {
  Add("a");
  Worker b = Add("b");
  const v1::Job job = StartRunning(Spec(2));  // max_restarts 0: FAILED
  // b stops beating; 4 s later a's collective fails with cause PEER.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(1));
    BeatAsAssigned(workers_[0]);
    c_->Tick();
  }
  ASSERT_OK(Fail(job, 0, "receiving from rank 1: connection reset",
                 v1::FAILURE_CAUSE_PEER));
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);  // held
  clock_.Advance(absl::Milliseconds(1500));  // b is lost within the window
  c_->Tick();
  ASSERT_EQ(StateOf(b.id), v1::LOST);
  const v1::Job failed = GetJob(job.id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.reason(), StartsWith("rank 1 (worker w-2) lost: "));
  EXPECT_THAT(failed.reason(),
              HasSubstr("; rank 0 (worker w-1) then failed: receiving from "
                        "rank 1: connection reset"));
}

TEST_F(CoordinatorRestartTest, PeerFailureWithNoLossNamesTheBlamedRank) {
  Add("a");
  Add("b");
  Add("c");
  const v1::Job job = StartRunning(Restartable(1));
  ASSERT_OK(Fail(job, 0, "deadline", v1::FAILURE_CAUSE_PEER, /*blamed_rank=*/1));
  clock_.Advance(absl::Milliseconds(1999));
  c_->Tick();
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  clock_.Advance(absl::Milliseconds(1));
  c_->Tick();
  const v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.reason(),
            "restart 1 of 1 after: rank 1 (worker w-2) stopped answering; "
            "rank 0 (worker w-1) then failed: deadline");
}

TEST_F(CoordinatorRestartTest, PeerFailureWithoutBlameNamesTheRank) {
  Add("a");
  Add("b");
  const v1::Job job = StartRunning(Spec(2));
  ASSERT_OK(Fail(job, 1, "peer gone", v1::FAILURE_CAUSE_PEER));
  clock_.Advance(options_.blame_window);
  c_->Tick();
  EXPECT_EQ(GetJob(job.id()).reason(), "rank 1 (worker w-2) failed: peer gone");
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

TEST_F(CoordinatorRestartTest, RestartCountAndCauseSurviveCoordinatorRestart) {
  const std::string path = TempPath("state.db");
  Open(path);
  Worker a = Add("a");
  Worker b = Add("b");
  const v1::Job job = StartRunning(Restartable(2));
  LoseByTimeout(b);
  ASSERT_EQ(GetJob(job.id()).state(), v1::QUEUED);
  const std::string reason = GetJob(job.id()).reason();

  Open(path);  // a new coordinator on the same store
  const v1::Job loaded = GetJob(job.id());
  EXPECT_EQ(loaded.state(), v1::QUEUED);
  EXPECT_EQ(loaded.restarts(), 1);
  EXPECT_EQ(loaded.reason(), reason);
  ASSERT_OK(Beat(a));
  Add("c");
  const v1::Job after = GetJob(job.id());
  ASSERT_EQ(after.state(), v1::STARTING);
  EXPECT_EQ(after.restarts(), 1);
  EXPECT_THAT(after.reason(),
              StartsWith("restart 1 of 2 after: worker w-2 (rank 1) lost: "));
  ASSERT_EQ(Restarts(job.id()).size(), 1u);
  EXPECT_THAT(Restarts(job.id())[0].cause(),
              StartsWith("worker w-2 (rank 1) lost: "));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
