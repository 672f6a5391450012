#include "worker/api/session.h"

#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/comm/fake_communicator.h"
#include "worker/gpu/device.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

using Environment = std::map<std::string, std::string>;

absl::StatusOr<SessionEnvironment> Parse(const Environment& vars) {
  return ParseSessionEnvironment([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

Environment AgentEnvironment() {
  return {{"PSHARD_COORDINATOR", "10.0.0.1:7000"},
          {"PSHARD_JOB_ID", "job-3"},
          {"PSHARD_EPOCH", "2"},
          {"PSHARD_RANK", "1"},
          {"PSHARD_WORLD_SIZE", "3"},
          {"PSHARD_WORKER_ID", "w-7"},
          {"PSHARD_HOSTNAME", "10.0.0.9"},
          {"PSHARD_COLLECTIVE_TIMEOUT_SECONDS", "12.5"},
          {"PSHARD_CHECKPOINT_DIR", "/ckpt/job-3"},
          {"PSHARD_CHECKPOINT_FINGERPRINT", std::string(64, 'a')},
          {"PSHARD_RESUME_FROM", "/ckpt/job-3/step-20"},
          {"PSHARD_ERROR_FILE", "/logs/job-3/rank-1.error.json"},
          // torchrun's names do not count in coordinator mode.
          {"RANK", "0"},
          {"WORLD_SIZE", "1"}};
}

TEST(ParseSessionEnvironmentTest, ReadsTheAgentsContract) {
  ASSERT_OK_AND_ASSIGN(SessionEnvironment env, Parse(AgentEnvironment()));
  EXPECT_EQ(env.coordinator, "10.0.0.1:7000");
  EXPECT_EQ(env.job_id, "job-3");
  EXPECT_EQ(env.epoch, 2);
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 3);
  EXPECT_EQ(env.worker_id, "w-7");
  EXPECT_EQ(env.hostname, "10.0.0.9");
  EXPECT_EQ(env.timeout, absl::Milliseconds(12500));
  EXPECT_EQ(env.checkpoint_dir, "/ckpt/job-3");
  EXPECT_EQ(env.checkpoint_fingerprint, std::string(64, 'a'));
  EXPECT_EQ(env.resume_from, "/ckpt/job-3/step-20");
  EXPECT_EQ(env.error_file, "/logs/job-3/rank-1.error.json");
  EXPECT_TRUE(env.local_store.empty());
}

TEST(ParseSessionEnvironmentTest, LocalModeTakesTorchrunsRankAndWorldSize) {
  ASSERT_OK_AND_ASSIGN(
      SessionEnvironment env,
      Parse({{"PSHARD_LOCAL_STORE", "/tmp/x"}, {"RANK", "2"},
             {"WORLD_SIZE", "3"}}));
  EXPECT_TRUE(env.coordinator.empty());
  EXPECT_EQ(env.local_store, "/tmp/x");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 3);
  EXPECT_EQ(env.hostname, "127.0.0.1");
  EXPECT_EQ(env.timeout, absl::Seconds(60));
}

TEST(ParseSessionEnvironmentTest, ErrorsNameTheVariable) {
  EXPECT_THAT(Parse({}), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("not started by a pshard agent")));
  struct Case {
    std::string variable;
    std::string value;  // "" removes it
    std::string message;
  };
  for (const Case& c : {
           Case{"PSHARD_JOB_ID", "", "PSHARD_JOB_ID is not set"},
           Case{"PSHARD_EPOCH", "0", "PSHARD_EPOCH: must be an integer"},
           Case{"PSHARD_RANK", "3", "PSHARD_RANK: must be an integer in [0, 2]"},
           Case{"PSHARD_RANK", "x", "PSHARD_RANK"},
           Case{"PSHARD_WORLD_SIZE", "5000", "PSHARD_WORLD_SIZE"},
           Case{"PSHARD_WORKER_ID", "", "PSHARD_WORKER_ID is not set"},
           Case{"PSHARD_HOSTNAME", "", "PSHARD_HOSTNAME is not set"},
           Case{"PSHARD_COLLECTIVE_TIMEOUT_SECONDS", "-1",
                "PSHARD_COLLECTIVE_TIMEOUT_SECONDS"},
           Case{"PSHARD_CHECKPOINT_FINGERPRINT", "abc",
                "PSHARD_CHECKPOINT_FINGERPRINT: must be 64 lowercase hex"},
       }) {
    Environment vars = AgentEnvironment();
    if (c.value.empty()) {
      vars.erase(c.variable);
    } else {
      vars[c.variable] = c.value;
    }
    EXPECT_THAT(Parse(vars), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr(c.message)))
        << c.variable << "=" << c.value;
  }
  EXPECT_THAT(Parse({{"PSHARD_LOCAL_STORE", "/tmp/x"}, {"WORLD_SIZE", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("RANK is not set")));
}

// One rank in local mode: the whole life of a session, and its order rules.
TEST(SessionTest, OneLocalRankStepsAndEnforcesTheCallOrder) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/s.XXXXXX");
  SessionEnvironment env;
  env.local_store = mkdtemp(dir.data());
  env.timeout = absl::Seconds(10);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Session> session, Session::Open(env));

  EXPECT_THAT(session->FinishStep(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not prepared")));
  EXPECT_THAT(session->Prepare(), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("optimizer: not set")));
  ASSERT_OK(session->SetOptimizerJson(
      R"({"kind": "SGD", "hyper_parameters": {"lr": 0.5}})"));
  ASSERT_OK_AND_ASSIGN(int w, session->RegisterParameter("w", {2, 3}));
  ASSERT_OK_AND_ASSIGN(int s, session->RegisterParameter("s", {}));
  EXPECT_EQ(w, 0);
  EXPECT_EQ(s, 1);
  EXPECT_THAT(session->RegisterParameter("w", {1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"w\" is registered twice")));
  EXPECT_THAT(session->RegisterParameter("z", {2, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape[1] is 0")));
  ASSERT_OK(session->Prepare());
  EXPECT_THAT(session->RegisterParameter("late", {1}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("already prepared")));

  ASSERT_OK(session->CheckPrepared());
  for (float& p : session->parameter(0)) p = 1;
  session->parameter(1)[0] = 2;
  for (float& g : session->gradient(0)) g = 1;
  session->gradient(1)[0] = -2;
  ASSERT_OK(session->GradientReady(1));
  ASSERT_OK(session->GradientReady(0));
  EXPECT_THAT(session->GradientReady(0),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("\"w\"")));
  ASSERT_OK(session->FinishStep());
  // SGD, lr 0.5, one rank: p - 0.5 g.
  for (float p : session->parameter(0)) EXPECT_FLOAT_EQ(p, 0.5f);
  EXPECT_FLOAT_EQ(session->parameter(1)[0], 3.0f);
  ASSERT_OK_AND_ASSIGN(double loss, session->AverageLoss(1.25));
  EXPECT_DOUBLE_EQ(loss, 1.25);
  ASSERT_OK(session->ReportProgress(1, loss, 8));
  EXPECT_THAT(session->ReportProgress(0, loss, 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step")));
  ASSERT_OK(session->Close());
  EXPECT_THAT(session->FinishStep(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("closed")));
}

// A program that raises between its first gradient and FinishStep drops its
// session mid-step: its collectives are cut short and its memory goes
// cleanly, and its peer's step fails, sticky, instead of waiting for it.
TEST(SessionTest, ASessionDroppedMidStepFailsItsPeersStep) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/m.XXXXXX");
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  absl::Notification rank0_dropped;
  absl::Status rank1_step;
  absl::Status rank1_after;
  auto run_rank = [&](int rank) {
    SessionEnvironment env;
    env.local_store = dir;
    env.rank = rank;
    env.world_size = 2;
    env.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Session>> opened = Session::Open(env);
    ASSERT_OK(opened);
    std::unique_ptr<Session> session = *std::move(opened);
    ASSERT_OK(session->SetOptimizerJson(
        R"({"kind": "ADAM", "hyper_parameters": {"lr": 0.01}})"));
    // Buckets of one parameter each, so that each gradient starts its own
    // reduction.
    ASSERT_OK(session->SetBucketCapMb(0.001));
    for (const char* name : {"a", "b", "c"}) {
      ASSERT_OK(session->RegisterParameter(name, {512}).status());
    }
    ASSERT_OK(session->Prepare());
    for (int step = 0; step < 2; ++step) {
      for (int i = session->num_parameters() - 1; i >= 0; --i) {
        for (float& g : session->gradient(i)) g = 0.5f * (rank + 1);
        if (step == 1 && rank == 0 && i == 1) {
          // Two of three gradients marked: rank 0's program is gone.
          session.reset();
          rank0_dropped.Notify();
          return;
        }
        if (step == 1 && rank == 1 && i == 0) {
          rank0_dropped.WaitForNotification();
        }
        ASSERT_OK(session->GradientReady(i));
      }
      if (step == 0) {
        ASSERT_OK(session->FinishStep());
        continue;
      }
      rank1_step = session->FinishStep();
      rank1_after = session->FinishStep();
    }
  };
  std::thread rank0(run_rank, 0);
  std::thread rank1(run_rank, 1);
  rank0.join();
  rank1.join();
  // "step 2: receiving from rank 0 ...: shared-memory channel closed".
  EXPECT_FALSE(rank1_step.ok());
  EXPECT_NE(rank1_step.code(), absl::StatusCode::kDeadlineExceeded)
      << rank1_step;
  EXPECT_THAT(rank1_step.message(), HasSubstr("rank 0"));
  EXPECT_THAT(rank1_after, StatusIs(absl::StatusCode::kAborted,
                                    HasSubstr("the session failed earlier")));
}

// Broadcast copies root's bytes, odd sizes too; a rank that gives another
// size makes every rank refuse, naming both sizes, and copy nothing.
TEST(SessionTest, BroadcastCopiesRootsBytesAndRefusesSizesThatDiffer) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/b.XXXXXX");
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  constexpr int kWorld = 3;
  std::vector<std::string> got(kWorld);
  std::vector<absl::Status> mismatch(kWorld);
  std::vector<std::string> after_mismatch(kWorld);
  auto run_rank = [&](int rank) {
    SessionEnvironment env;
    env.local_store = dir;
    env.rank = rank;
    env.world_size = kWorld;
    env.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Session>> session = Session::Open(env);
    ASSERT_OK(session);
    // Root 1's 7 bytes (odd) over everyone's.
    std::string bytes = rank == 1 ? "buffers" : absl::StrCat("rank ", rank, "!");
    ASSERT_EQ(bytes.size(), 7u);
    ASSERT_OK((*session)->Broadcast(1, absl::MakeSpan(bytes)));
    got[rank] = bytes;
    std::string sized = rank == 2 ? "longer" : "short";
    mismatch[rank] = (*session)->Broadcast(0, absl::MakeSpan(sized));
    after_mismatch[rank] = sized;
    EXPECT_THAT((*session)->Broadcast(kWorld, absl::MakeSpan(sized)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("root: must be a rank in [0, 3), got 3")));
    // Refusals are not failures: the session goes on.
    std::string empty;
    EXPECT_OK((*session)->Broadcast(2, absl::MakeSpan(empty)));
    EXPECT_OK((*session)->Close());
  };
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) ranks.emplace_back(run_rank, rank);
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(got[rank], "buffers");
    EXPECT_THAT(mismatch[rank],
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("as many bytes as root 0")));
    EXPECT_THAT(mismatch[rank].message(), HasSubstr("1 of 3 ranks differ"));
    EXPECT_EQ(after_mismatch[rank], rank == 2 ? "longer" : "short");
  }
  EXPECT_THAT(mismatch[2].message(), HasSubstr("this rank 6, root 5"));
}

std::unique_ptr<Session> OpenLocalRank() {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/d.XXXXXX");
  SessionEnvironment env;
  env.local_store = mkdtemp(dir.data());
  env.timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Open(env);
  EXPECT_OK(session);
  return session.ok() ? *std::move(session) : nullptr;
}

// What the device path checks before it needs a device (session_gpu_test
// runs it on one).
TEST(SessionTest, DeviceMemoryIsCheckedBeforeAnyDeviceIsNeeded) {
  std::unique_ptr<Session> session = OpenLocalRank();
  ASSERT_NE(session, nullptr);
  CudaPlacement placement;
  placement.device = -1;
  EXPECT_THAT(session->SetCudaPlacement(placement),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("CUDA device: must be >= 0, got -1")));
  ASSERT_OK(session->SetOptimizerJson(R"({"kind": "ADAM"})"));
  ASSERT_OK(session->RegisterParameter("w", {4}, DataType::kFloat32,
                                       ParameterMemory::kCuda)
                .status());
  EXPECT_EQ(session->memory(), ParameterMemory::kCuda);
  EXPECT_THAT(session->RegisterParameter("b", {4}, DataType::kFloat32,
                                         ParameterMemory::kHost),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameter \"b\": in host memory, but the "
                                 "parameters before it are not")));
  std::string why_no_device;
  if (CudaDeviceCount(&why_no_device) == 0) {
    // Here the NCCL communicator cannot open: the error says why.
    EXPECT_THAT(session->Prepare(),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("CUDA")));
  }
}

TEST(SessionTest, DeviceMemoryNeedsAnOpenedSession) {
  FakeHub hub(1);
  std::unique_ptr<Communicator> comm = hub.Create(0);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Session> session,
                       Session::Attach(comm.get(), AttachOptions()));
  ASSERT_OK(session->SetOptimizerJson(
      R"({"kind": "SGD", "hyper_parameters": {"lr": 0.1}})"));
  ASSERT_OK(session->RegisterParameter("w", {4}, DataType::kFloat32,
                                       ParameterMemory::kCuda)
                .status());
  EXPECT_THAT(session->Prepare(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("need a session opened from the "
                                 "environment")));
}

}  // namespace
}  // namespace pshard::worker
