// Access control end to end through the real binaries: a coordinator and two
// workers under mutual TLS with bearer tokens (tests/testing/cluster.h,
// access = true). Every principal against every RPC of both servers, then
// the impersonations an anonymous or foreign client could once get away
// with (issue 16): another worker's heartbeat, name, result, attachment,
// bucket report and rendezvous keys; another user's job; the incarnations.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "pshard/v1/worker_status.grpc.pb.h"
#include "security/transport.h"
#include "security/transport_flags.h"
#include "tests/cli/pshardctl_runner.h"
#include "tests/testing/cluster.h"

namespace pshard::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Who may call what, written out here rather than read from
// security/rpc_roles.cc, so that a wrong rule there fails this test.
enum class Needs { kNothing, kRead, kSubmit, kAdmin, kWorker };

bool Holds(const std::string& principal, Needs needs) {
  switch (needs) {
    case Needs::kNothing:
      return true;
    case Needs::kRead:
      return principal == "viewer" || principal == "alice" ||
             principal == "admin";
    case Needs::kSubmit:
      return principal == "alice" || principal == "admin";
    case Needs::kAdmin:
      return principal == "admin";
    case Needs::kWorker:
      return principal == "worker-0";
  }
  return false;
}

template <typename Stub>
std::unique_ptr<typename Stub::Stub> StubAs(
    const std::string& address, const security::TransportSecurity& security) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      security::NewChannel(address, security);
  EXPECT_OK(channel.status());
  return Stub::NewStub(*channel);
}

void Deadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
}

// The stubs of one principal, on the coordinator and on worker 0.
struct Stubs {
  Stubs(Cluster& cluster, const std::string& principal) {
    const security::TransportSecurity s = cluster.client_security_as(principal);
    jobs = StubAs<v1::JobService>(cluster.address(), s);
    shards = StubAs<v1::ShardService>(cluster.address(), s);
    workers = StubAs<v1::ClusterService>(cluster.address(), s);
    control = StubAs<v1::WorkerControl>(cluster.address(), s);
    health = StubAs<grpc::health::v1::Health>(cluster.address(), s);
    status = StubAs<v1::WorkerStatus>(cluster.worker_status_address(0), s);
  }
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::ShardService::Stub> shards;
  std::unique_ptr<v1::ClusterService::Stub> workers;
  std::unique_ptr<v1::WorkerControl::Stub> control;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
  std::unique_ptr<v1::WorkerStatus::Stub> status;
};

template <typename Response>
grpc::Status ReadStream(std::unique_ptr<grpc::ClientReader<Response>> reader) {
  Response r;
  while (reader->Read(&r)) {
  }
  return reader->Finish();
}

class AuthE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.workers = 2;
    options.tls = true;
    options.access = true;
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
    ASSERT_OK(cluster.status());
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // Worker `name`'s id, as an admin sees it.
  static std::string WorkerId(const std::string& name) {
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
        cluster_->Workers(false);
    EXPECT_OK(workers.status());
    for (const v1::WorkerInfo& w : *workers) {
      if (w.name() == name) return w.id();
    }
    ADD_FAILURE() << "no worker " << name;
    return "";
  }

  static Cluster* cluster_;
};

Cluster* AuthE2eTest::cluster_ = nullptr;

// Requests that change nothing: unknown jobs and workers, a wrong
// incarnation, an empty spec. A call the caller may make fails for those
// reasons (or succeeds); one it may not make fails for its credential.
TEST_F(AuthE2eTest, EveryPrincipalAgainstEveryRpc) {
  const std::string w0 = WorkerId("worker-0");
  ASSERT_FALSE(w0.empty());
  struct Rpc {
    std::string name;
    Needs needs;
    std::function<grpc::Status(Stubs&)> call;
  };
  const std::vector<Rpc> rpcs = {
      {"SubmitJob", Needs::kSubmit,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::Job r;
         return s.jobs->SubmitJob(&c, v1::SubmitJobRequest(), &r);
       }},
      {"GetJob", Needs::kRead,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::GetJobRequest q;
         q.set_job_id("job-999999");
         v1::Job r;
         return s.jobs->GetJob(&c, q, &r);
       }},
      {"ListJobs", Needs::kRead,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::ListJobsResponse r;
         return s.jobs->ListJobs(&c, v1::ListJobsRequest(), &r);
       }},
      {"CancelJob", Needs::kSubmit,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::CancelJobRequest q;
         q.set_job_id("job-999999");
         v1::Job r;
         return s.jobs->CancelJob(&c, q, &r);
       }},
      {"WatchJob", Needs::kRead,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::WatchJobRequest q;
         q.set_job_id("job-999999");
         return ReadStream(s.jobs->WatchJob(&c, q));
       }},
      {"GetShardAssignment", Needs::kRead,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::GetShardAssignmentRequest q;
         q.set_job_id("job-999999");
         v1::ShardAssignment r;
         return s.shards->GetShardAssignment(&c, q, &r);
       }},
      {"ListWorkers", Needs::kRead,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::ListWorkersResponse r;
         return s.workers->ListWorkers(&c, v1::ListWorkersRequest(), &r);
       }},
      {"GetWorker", Needs::kRead,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::GetWorkerRequest q;
         q.set_worker("nobody");
         v1::WorkerInfo r;
         return s.workers->GetWorker(&c, q, &r);
       }},
      {"DrainWorker", Needs::kAdmin,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::DrainWorkerRequest q;
         q.set_worker("nobody");
         v1::WorkerInfo r;
         return s.workers->DrainWorker(&c, q, &r);
       }},
      {"UndrainWorker", Needs::kAdmin,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::UndrainWorkerRequest q;
         q.set_worker("nobody");
         v1::WorkerInfo r;
         return s.workers->UndrainWorker(&c, q, &r);
       }},
      {"RegisterWorker", Needs::kWorker,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::RegisterWorkerRequest q;
         q.set_name("worker-0");  // no incarnation: refused as invalid
         v1::RegisterWorkerResponse r;
         return s.control->RegisterWorker(&c, q, &r);
       }},
      {"Heartbeat", Needs::kWorker,
       [&w0](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::HeartbeatRequest q;
         q.set_worker_id(w0);
         q.set_incarnation("not-its-incarnation");
         v1::HeartbeatResponse r;
         return s.control->Heartbeat(&c, q, &r);
       }},
      {"KvPut", Needs::kWorker,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::KvPutRequest q;
         q.set_job_id("job-999999");
         q.set_key("k");
         v1::KvPutResponse r;
         return s.control->KvPut(&c, q, &r);
       }},
      {"KvGet", Needs::kWorker,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::KvGetRequest q;
         q.set_job_id("job-999999");
         q.set_key("k");
         v1::KvGetResponse r;
         return s.control->KvGet(&c, q, &r);
       }},
      {"ReportBuckets", Needs::kWorker,
       [&w0](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::ReportBucketsRequest q;
         q.set_job_id("job-999999");
         q.set_worker_id(w0);
         v1::ReportBucketsResponse r;
         return s.control->ReportBuckets(&c, q, &r);
       }},
      {"GetAssignment", Needs::kWorker,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::GetAssignmentRequest q;
         q.set_job_id("job-999999");
         v1::ShardAssignment r;
         return s.control->GetAssignment(&c, q, &r);
       }},
      {"ReportProgress", Needs::kWorker,
       [&w0](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::ReportProgressRequest q;
         q.set_job_id("job-999999");
         q.set_worker_id(w0);
         v1::ReportProgressResponse r;
         return s.control->ReportProgress(&c, q, &r);
       }},
      {"ReportResult", Needs::kWorker,
       [&w0](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::ReportResultRequest q;
         q.set_job_id("job-999999");
         q.set_worker_id(w0);
         v1::ReportResultResponse r;
         return s.control->ReportResult(&c, q, &r);
       }},
      {"ReportCheckpoint", Needs::kWorker,
       [&w0](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::ReportCheckpointRequest q;
         q.set_job_id("job-999999");
         q.set_worker_id(w0);
         v1::ReportCheckpointResponse r;
         return s.control->ReportCheckpoint(&c, q, &r);
       }},
      {"Attach", Needs::kWorker,
       [&w0](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::AttachRequest q;
         q.set_worker_id(w0);
         q.set_incarnation("not-its-incarnation");
         return ReadStream(s.control->Attach(&c, q));
       }},
      {"Health/Check", Needs::kNothing,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         grpc::health::v1::HealthCheckResponse r;
         return s.health->Check(&c, grpc::health::v1::HealthCheckRequest(),
                                &r);
       }},
      {"WorkerStatus/GetStatus", Needs::kRead,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::GetWorkerStatusResponse r;
         return s.status->GetStatus(&c, v1::GetWorkerStatusRequest(), &r);
       }},
      {"WorkerStatus/StreamLogs", Needs::kRead,
       [](Stubs& s) {
         grpc::ClientContext c;
         Deadline(c);
         v1::StreamLogsRequest q;
         q.set_job_id("job-999999");
         return ReadStream(s.status->StreamLogs(&c, q));
       }},
  };

  for (const std::string principal :
       {"", "viewer", "alice", "admin", "worker-0"}) {
    Stubs stubs(*cluster_, principal);
    for (const Rpc& rpc : rpcs) {
      SCOPED_TRACE(absl::StrCat(principal.empty() ? "anonymous" : principal,
                                " calls ", rpc.name));
      const grpc::Status status = rpc.call(stubs);
      const std::string message = status.error_message();
      // A handshake or transport failure would look like neither.
      ASSERT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << message;
      ASSERT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
          << message;
      if (rpc.needs == Needs::kNothing) {
        EXPECT_TRUE(status.ok()) << message;
      } else if (principal.empty()) {
        // The test client presents a certificate (mutual TLS) that no
        // identity maps: the message says so, and what would do.
        EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << message;
        EXPECT_THAT(message, HasSubstr("needs a credential with role"));
        EXPECT_THAT(message, HasSubstr("\"pshardctl\""));
      } else if (Holds(principal, rpc.needs)) {
        EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << message;
        EXPECT_THAT(message, Not(HasSubstr("it needs role"))) << message;
      } else {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << message;
        EXPECT_THAT(message, HasSubstr(absl::StrCat(principal, " (roles: ")));
        EXPECT_THAT(message, HasSubstr("it needs role"));
      }
    }
  }

  // A wrong token is refused, and never repeated back.
  security::TransportSecurity wrong = cluster_->client_security_as("");
  wrong.bearer_token = std::string(64, 'f');
  auto jobs = StubAs<v1::JobService>(cluster_->address(), wrong);
  grpc::ClientContext c;
  Deadline(c);
  v1::ListJobsResponse r;
  const grpc::Status status = jobs->ListJobs(&c, v1::ListJobsRequest(), &r);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("bearer token is not one"));
  EXPECT_THAT(status.error_message(), Not(HasSubstr(wrong.bearer_token)));
}

v1::JobSpec OneRankUntilCancelled() {
  v1::JobSpec spec;
  spec.set_name("held");
  spec.set_world_size(1);
  spec.mutable_synthetic()->set_num_parameters(2000);
  spec.mutable_synthetic()->set_tensor_numel(500);
  spec.set_steps(100000000);
  spec.set_progress_every(1);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  return spec;
}

TEST_F(AuthE2eTest, NoCredentialActsForAnotherWorkerOrUser) {
  // alice's job, on one of the two workers.
  Stubs alice(*cluster_, "alice");
  v1::Job job;
  {
    grpc::ClientContext c;
    Deadline(c);
    v1::SubmitJobRequest q;
    *q.mutable_spec() = OneRankUntilCancelled();
    q.set_request_id("alice-1");
    ASSERT_TRUE(alice.jobs->SubmitJob(&c, q, &job).ok());
  }
  EXPECT_EQ(job.owner(), "alice");
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<v1::Job> j = cluster_->GetJob(job.id());
        return j.ok() && j->progress().step() >= 2;
      },
      absl::Seconds(60)))
      << cluster_->Logs();
  ASSERT_OK_AND_ASSIGN(job, cluster_->GetJob(job.id()));
  ASSERT_EQ(job.members_size(), 1);
  const std::string member_id = job.members(0).worker_id();
  const std::string member =
      member_id == WorkerId("worker-0") ? "worker-0" : "worker-1";
  const std::string other = member == "worker-0" ? "worker-1" : "worker-0";
  Stubs as_other(*cluster_, other);
  Stubs as_member(*cluster_, member);

  auto expect_denied = [](const grpc::Status& status,
                          const std::string& what) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(what));
  };
  {
    // The other worker's credential cannot beat for the member...
    grpc::ClientContext c;
    Deadline(c);
    v1::HeartbeatRequest q;
    q.set_worker_id(member_id);
    q.set_incarnation("forged");
    v1::HeartbeatResponse r;
    expect_denied(as_other.control->Heartbeat(&c, q, &r),
                  "may act only as that worker");
  }
  {
    // ... take its name ...
    grpc::ClientContext c;
    Deadline(c);
    v1::RegisterWorkerRequest q;
    q.set_name(member);
    q.set_incarnation("forged");
    v1::RegisterWorkerResponse r;
    expect_denied(as_other.control->RegisterWorker(&c, q, &r),
                  "may register only under that name");
  }
  {
    // ... fail its job with a forged result ...
    grpc::ClientContext c;
    Deadline(c);
    v1::ReportResultRequest q;
    q.set_job_id(job.id());
    q.set_epoch(job.epoch());
    q.set_rank(0);
    q.set_worker_id(member_id);
    q.set_error("forged failure");
    v1::ReportResultResponse r;
    expect_denied(as_other.control->ReportResult(&c, q, &r),
                  "may act only as that worker");
  }
  {
    // ... replace its attachment (which would hide a frozen worker) ...
    grpc::ClientContext c;
    Deadline(c);
    v1::AttachRequest q;
    q.set_worker_id(member_id);
    q.set_incarnation("forged");
    expect_denied(ReadStream(as_other.control->Attach(&c, q)),
                  "may act only as that worker");
  }
  {
    // ... report buckets as it ...
    grpc::ClientContext c;
    Deadline(c);
    v1::ReportBucketsRequest q;
    q.set_job_id(job.id());
    q.set_epoch(job.epoch());
    q.set_worker_id(member_id);
    v1::ReportBucketsResponse r;
    expect_denied(as_other.control->ReportBuckets(&c, q, &r),
                  "may act only as that worker");
  }
  // ... or read and write the job's rendezvous store, or its assignment.
  for (Stubs* stubs : {&as_other, &alice}) {
    grpc::ClientContext put;
    Deadline(put);
    v1::KvPutRequest q;
    q.set_job_id(job.id());
    q.set_epoch(job.epoch());
    q.set_key("planted");
    q.set_value("x");
    v1::KvPutResponse r;
    const grpc::Status status = stubs->control->KvPut(&put, q, &r);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << status.error_message();
  }
  {
    grpc::ClientContext c;
    Deadline(c);
    v1::KvGetRequest q;
    q.set_job_id(job.id());
    q.set_epoch(job.epoch());
    q.set_key("anything");
    v1::KvGetResponse r;
    expect_denied(as_other.control->KvGet(&c, q, &r), "holds no rank of");
  }
  {
    grpc::ClientContext c;
    Deadline(c);
    v1::GetAssignmentRequest q;
    q.set_job_id(job.id());
    q.set_epoch(job.epoch());
    v1::ShardAssignment r;
    expect_denied(as_other.control->GetAssignment(&c, q, &r),
                  "holds no rank of");
  }
  {
    // The member itself may use its job's store.
    grpc::ClientContext c;
    Deadline(c);
    v1::KvPutRequest q;
    q.set_job_id(job.id());
    q.set_epoch(job.epoch());
    q.set_key("auth-e2e/member");
    q.set_value("ok");
    v1::KvPutResponse r;
    const grpc::Status status = as_member.control->KvPut(&c, q, &r);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  // None of it touched the job.
  ASSERT_OK_AND_ASSIGN(v1::Job still, cluster_->GetJob(job.id()));
  EXPECT_EQ(still.state(), v1::RUNNING) << still.reason();

  // Incarnations are for admins.
  for (const auto& [principal, shown] :
       {std::pair<std::string, bool>{"viewer", false}, {"alice", false},
        {"admin", true}}) {
    Stubs stubs(*cluster_, principal);
    grpc::ClientContext c;
    Deadline(c);
    v1::ListWorkersResponse r;
    ASSERT_TRUE(stubs.workers->ListWorkers(&c, v1::ListWorkersRequest(), &r)
                    .ok());
    ASSERT_EQ(r.workers_size(), 2);
    for (const v1::WorkerInfo& w : r.workers()) {
      EXPECT_EQ(!w.incarnation().empty(), shown) << principal;
    }
    grpc::ClientContext g;
    Deadline(g);
    v1::GetWorkerRequest q;
    q.set_worker(member);
    v1::WorkerInfo one;
    ASSERT_TRUE(stubs.workers->GetWorker(&g, q, &one).ok());
    EXPECT_EQ(!one.incarnation().empty(), shown) << principal;
  }

  // bob cannot take alice's request_id, nor cancel her job; admin can.
  Stubs bob(*cluster_, "bob");
  {
    grpc::ClientContext c;
    Deadline(c);
    v1::SubmitJobRequest q;
    *q.mutable_spec() = OneRankUntilCancelled();
    q.set_request_id("alice-1");
    v1::Job r;
    const grpc::Status status = bob.jobs->SubmitJob(&c, q, &r);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS)
        << status.error_message();
    EXPECT_THAT(status.error_message(), Not(HasSubstr(job.id())));
  }
  {
    grpc::ClientContext c;
    Deadline(c);
    v1::CancelJobRequest q;
    q.set_job_id(job.id());
    v1::Job r;
    expect_denied(bob.jobs->CancelJob(&c, q, &r),
                  "bob may not cancel " + job.id() +
                      ": it is \"alice\"'s, and cancelling another's job "
                      "needs role admin");
  }
  {
    Stubs admin(*cluster_, "admin");
    grpc::ClientContext c;
    Deadline(c);
    v1::CancelJobRequest q;
    q.set_job_id(job.id());
    v1::Job r;
    const grpc::Status status = admin.jobs->CancelJob(&c, q, &r);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(job.id(), absl::Seconds(60)));
  EXPECT_EQ(ended.state(), v1::CANCELLED) << ended.reason();
}

TEST_F(AuthE2eTest, PshardctlPresentsItsToken) {
  const std::vector<std::string> tls =
      security::TransportSecurityFlags(cluster_->client_security_as(""));
  auto run = [&](const std::string& principal, std::vector<std::string> args,
                 std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {"--coordinator=" + cluster_->address()};
    argv.insert(argv.end(), tls.begin(), tls.end());
    if (!principal.empty()) {
      argv.push_back("--token_file=" + cluster_->token_file(principal));
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return RunPshardctl(argv, env, absl::Seconds(60));
  };
  CliResult r = run("viewer", {"workers"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("worker-0"));
  r = run("viewer", {"drain", "worker-0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("viewer (roles: read) may not call "
                               "DrainWorker: it needs role admin"));
  r = run("", {"list"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--token_file or $PSHARD_TOKEN"));
  // The token from the environment.
  r = run("", {"list"}, {"PSHARD_TOKEN_FILE=" + cluster_->token_file("alice")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run("", {"list", "--token_file=/no/such/token"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("pshardctl: --token_file: "));
}

}  // namespace
}  // namespace pshard::testing
