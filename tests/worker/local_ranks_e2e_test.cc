// End to end, multi-rank nodes (issue 18 item 3): a coordinator with access
// control on, node 0 one `pshard-worker --local_ranks 2` (a supervisor whose
// two children share its worker token) on host 127.0.0.1, node 1 a plain
// worker on host 127.0.1.1. The children register as node-0:0 and node-0:1
// on the same host; a 3-rank mlp job and a 3-rank program job succeed with
// node 0's ranks contiguous and LOCAL_RANK/LOCAL_WORLD_SIZE from the
// placement; the token of node-0 registers as node-0:<i> but not as
// node-1:1, node-0:x or node-0:1:2; a kill -9 of the supervisor leaves no
// child behind.
#include <dirent.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "security/transport.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// The pids whose parent is `parent` (from /proc/<pid>/stat).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    // "pid (comm) state ppid ...": comm may hold spaces, so after the ')'.
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(paren + 2), ' ');
    pid_t ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) &&
        ppid == parent) {
      children.push_back(pid);
    }
  }
  closedir(proc);
  return children;
}

class LocalRanksE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = MakeTempDir("local-ranks-out");
    ClusterOptions options;
    options.workers = 2;
    options.worker_name_prefix = "node-";
    options.local_ranks = {2, 1};
    options.access = true;
    // Two "hosts" on loopback: node i is 127.0.i.1 (the whole 127/8 is
    // local, so Gloo binds there).
    options.worker_flags = {"--host=127.0.{i}.1"};
    ASSERT_OK_AND_ASSIGN(cluster_, Cluster::Start(options));
  }

  std::map<std::string, v1::WorkerInfo> WorkersByName() {
    std::map<std::string, v1::WorkerInfo> out;
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
        cluster_->Workers(false);
    EXPECT_OK(workers.status());
    if (!workers.ok()) return out;
    for (const v1::WorkerInfo& w : *workers) out[w.name()] = w;
    return out;
  }

  // Node 0's ranks are contiguous, and there are `on_node0` of them.
  void ExpectNodeByNode(const v1::Job& job, int on_node0) {
    std::vector<std::string> hosts;
    for (const v1::JobMember& m : job.members()) hosts.push_back(m.host());
    ASSERT_EQ(static_cast<int>(hosts.size()), job.spec().world_size());
    int first = -1, last = -1, count = 0;
    for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
      if (hosts[r] != "127.0.0.1") continue;
      if (first < 0) first = r;
      last = r;
      ++count;
    }
    EXPECT_EQ(count, on_node0);
    EXPECT_EQ(last - first + 1, count) << "node 0's ranks are not contiguous";
  }

  std::string out_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(LocalRanksE2eTest, ChildrenRegisterOnOneHostAndJobsPlaceNodeByNode) {
  std::map<std::string, v1::WorkerInfo> workers = WorkersByName();
  ASSERT_EQ(workers.size(), 3u) << cluster_->Logs();
  ASSERT_EQ(workers.count("node-0:0"), 1u);
  ASSERT_EQ(workers.count("node-0:1"), 1u);
  ASSERT_EQ(workers.count("node-1"), 1u);
  EXPECT_EQ(workers["node-0:0"].host(), "127.0.0.1");
  EXPECT_EQ(workers["node-0:1"].host(), "127.0.0.1");
  EXPECT_EQ(workers["node-1"].host(), "127.0.1.1");
  EXPECT_NE(workers["node-0:0"].address(), workers["node-0:1"].address());

  // The mlp workload over the three ranks (Gloo between the two hosts).
  v1::JobSpec mlp;
  mlp.set_name("mlp");
  mlp.set_world_size(3);
  mlp.mutable_mlp()->set_input_dim(16);
  mlp.mutable_mlp()->add_hidden_dims(32);
  mlp.mutable_mlp()->set_output_dim(4);
  mlp.mutable_mlp()->set_batch_size(32);
  mlp.set_steps(20);
  mlp.set_seed(1);
  mlp.set_collective_timeout_seconds(20);
  mlp.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  mlp.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.003);
  ASSERT_OK_AND_ASSIGN(v1::Job submitted, cluster_->Submit(mlp));
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster_->WaitForEnd(submitted.id(), absl::Seconds(60)));
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason() << cluster_->Logs();
  EXPECT_EQ(ended.progress().step(), 20);
  ExpectNodeByNode(ended, 2);

  // A program prints where it is.
  v1::JobSpec program;
  program.set_name("where");
  program.set_world_size(3);
  program.mutable_program()->add_argv("/bin/sh");
  program.mutable_program()->add_argv("-c");
  program.mutable_program()->add_argv(
      "echo \"$LOCAL_RANK $LOCAL_WORLD_SIZE $RANK $PSHARD_HOSTNAME "
      "$PSHARD_DEVICE\" > \"$OUT/rank-$RANK.tmp\" && "
      "mv \"$OUT/rank-$RANK.tmp\" \"$OUT/rank-$RANK\"");
  (*program.mutable_program()->mutable_env())["OUT"] = out_;
  ASSERT_OK_AND_ASSIGN(submitted, cluster_->Submit(program));
  ASSERT_OK_AND_ASSIGN(ended,
                       cluster_->WaitForEnd(submitted.id(), absl::Seconds(60)));
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason() << cluster_->Logs();
  ExpectNodeByNode(ended, 2);
  std::map<std::string, int> next_local;  // per host, in rank order
  std::map<std::string, int> on_host;
  for (const v1::JobMember& m : ended.members()) ++on_host[m.host()];
  for (const v1::JobMember& m : ended.members()) {
    SCOPED_TRACE(absl::StrCat("rank ", m.rank()));
    const std::string line = std::string(absl::StripAsciiWhitespace(
        ReadFile(absl::StrCat(out_, "/rank-", m.rank()))));
    EXPECT_EQ(line, absl::StrCat(next_local[m.host()]++, " ", on_host[m.host()],
                                 " ", m.rank(), " ", m.host(), " cpu"));
  }
}

TEST_F(LocalRanksE2eTest, ANodeTokenCoversOnlyItsLocalRanks) {
  const security::TransportSecurity node0 =
      cluster_->client_security_as("node-0");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<grpc::Channel> channel,
                       security::NewChannel(cluster_->address(), node0));
  std::unique_ptr<v1::WorkerControl::Stub> stub =
      v1::WorkerControl::NewStub(channel);
  auto register_as = [&](const std::string& name) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    request.set_incarnation("test");
    request.set_host("127.0.0.9");
    v1::RegisterWorkerResponse response;
    return stub->RegisterWorker(&context, request, &response);
  };
  EXPECT_TRUE(register_as("node-0:5").ok());
  for (const char* name : {"node-1:1", "node-0:x", "node-0:1:2",
                                  "node-0:01", "node-0:64", "node-1"}) {
    const grpc::Status status = register_as(name);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << name;
    EXPECT_THAT(status.error_message(), HasSubstr("may register only")) << name;
  }
}

TEST_F(LocalRanksE2eTest, KillingTheSupervisorLeavesNoChild) {
  Subprocess& supervisor = cluster_->worker(0);
  std::vector<pid_t> children = ChildrenOf(supervisor.pid());
  ASSERT_EQ(children.size(), 2u);
  for (pid_t child : children) EXPECT_TRUE(ProcessAlive(child));
  ASSERT_OK(supervisor.Signal(SIGKILL));
  ASSERT_OK(supervisor.Wait(absl::Seconds(10)).status());
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (pid_t child : children) {
          if (ProcessAlive(child)) return false;
        }
        return true;
      },
      absl::Seconds(10)))
      << "a local rank outlived its supervisor";
}

TEST_F(LocalRanksE2eTest, SigtermStopsEveryLocalRankAndExitsZero) {
  Subprocess& supervisor = cluster_->worker(0);
  std::vector<pid_t> children = ChildrenOf(supervisor.pid());
  ASSERT_EQ(children.size(), 2u);
  ASSERT_OK(supervisor.Signal(SIGTERM));
  ASSERT_OK_AND_ASSIGN(const int status, supervisor.Wait(absl::Seconds(30)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (pid_t child : children) EXPECT_FALSE(ProcessAlive(child));
}

}  // namespace
}  // namespace pshard::testing
