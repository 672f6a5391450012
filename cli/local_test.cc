// Tests `pshardctl local` with stand-ins for the real binaries: the fake
// coordinator (a real gRPC server walking each job to SUCCEEDED) and a shell
// script as the worker. The end-to-end test with the real coordinator and
// workers is tests/cli/.
#include "cli/local.h"

#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::cli {
namespace {

using ::pshard::testing::MakeTempDir;
using ::pshard::testing::ProcessAlive;
using ::pshard::testing::RunfilePath;
using ::pshard::testing::WaitUntil;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  chmod(path.c_str(), 0755);
}

// Every "*.pid" file the stand-ins wrote into `run_dir`.
std::vector<pid_t> StartedPids(const std::string& run_dir, int workers) {
  std::vector<pid_t> pids;
  std::vector<std::string> names = {"coordinator"};
  for (int i = 0; i < workers; ++i) names.push_back(absl::StrCat("worker-", i));
  for (const std::string& name : names) {
    std::ifstream in(absl::StrCat(run_dir, "/", name, ".pid"));
    pid_t pid = 0;
    if (in >> pid) pids.push_back(pid);
  }
  return pids;
}

class LocalTest : public ::testing::Test {
 protected:
  // A bin dir whose coordinator is the stand-in (the real coordinator with
  // `workers` simulated workers that run its jobs) and whose worker writes
  // its pid and --device beside its port file, then the port file, and
  // sleeps.
  std::string MakeBinDir(int workers, bool worker_fails = false) {
    const std::string bin = MakeTempDir("bin");
    WriteScript(absl::StrCat(bin, "/pshard-coordinator"),
                absl::StrCat("for a in \"$@\"; do case \"$a\" in --state_path=*) "
                             "d=$(dirname \"${a#--state_path=}\");; esac; done\n"
                             "echo $$ > \"$d/coordinator.pid\"\n"
                             "exec ",
                             RunfilePath("cli/fake_coordinator_main"),
                             " --fake_workers=", workers, " \"$@\"\n"));
    WriteScript(
        absl::StrCat(bin, "/pshard-worker"),
        absl::StrCat(
            "for a in \"$@\"; do case \"$a\" in --port_file=*) "
            "pf=\"${a#--port_file=}\";; --name=*) n=\"${a#--name=local-}\";; "
            "--device=*) dev=\"${a#--device=}\";; esac; done\n"
            "echo $$ > \"$(dirname \"$pf\")/$n.pid\"\n"
            "echo \"$dev\" > \"$(dirname \"$pf\")/$n.device\"\n",
            worker_fails ? "echo 'worker: cannot open device' >&2; exit 1\n"
                         : "",
            "echo 4242 > \"$pf.tmp\" && mv \"$pf.tmp\" \"$pf\"\n"
            "exec sleep 600\n"));
    return bin;
  }

  // The --device each stand-in worker was given.
  static std::vector<std::string> WorkerDevices(const std::string& run_dir,
                                                int workers) {
    std::vector<std::string> devices;
    for (int i = 0; i < workers; ++i) {
      std::ifstream in(absl::StrCat(run_dir, "/worker-", i, ".device"));
      std::string device;
      in >> device;
      devices.push_back(device);
    }
    return devices;
  }

  int RunLocalNow(LocalOptions options) {
    options.startup_timeout = absl::Seconds(20);
    options.shutdown_grace = absl::Seconds(5);
    CliIo io{&out_, &err_, false};
    return RunLocal(options, io, &cancel_);
  }

  std::ostringstream out_;
  std::ostringstream err_;
  Cancellation cancel_;
};

TEST_F(LocalTest, DefaultJobRunsToCompletionAndLeavesNoProcess) {
  LocalOptions options;
  options.bin_dir = MakeBinDir(2);
  options.run_dir = MakeTempDir("run");
  EXPECT_EQ(RunLocalNow(options), kExitOk) << out_.str() << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, AllOf(HasSubstr("pshard local cluster: 2 CPU workers"),
                         HasSubstr("coordinator  pid "),
                         HasSubstr("worker 1     pid "),
                         HasSubstr("submitted job-1 \"mlp-adam-demo\""),
                         HasSubstr("BUCKET"), HasSubstr("policy balanced"),
                         HasSubstr("step 200/200 (100%)"),
                         HasSubstr("job-1 SUCCEEDED"),
                         HasSubstr(absl::StrCat("final parameters: ",
                                                options.run_dir,
                                                "/output/params.safetensors")),
                         HasSubstr("stopped 2 workers and the coordinator")));
  const std::vector<pid_t> pids = StartedPids(options.run_dir, 2);
  ASSERT_EQ(pids.size(), 3u);
  for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << "pid " << pid << " survived";
  EXPECT_THAT(WorkerDevices(options.run_dir, 2),
              ::testing::ElementsAre("cpu", "cpu"));
}

TEST_F(LocalTest, CudaPutsWorkerIOnGpuI) {
  LocalOptions options;
  options.device = "cuda";
  options.workers = 3;
  options.bin_dir = MakeBinDir(3);
  options.run_dir = MakeTempDir("run");
  EXPECT_EQ(RunLocalNow(options), kExitOk) << out_.str() << err_.str();
  EXPECT_THAT(out_.str(),
              HasSubstr("pshard local cluster: 3 GPU workers (cuda:0..cuda:2)"));
  EXPECT_THAT(WorkerDevices(options.run_dir, 3),
              ::testing::ElementsAre("cuda:0", "cuda:1", "cuda:2"));
}

TEST_F(LocalTest, UnknownDeviceExits2BeforeStartingAnything) {
  for (const char* device : {"gpu", "cuda:1", "", "CPU"}) {
    SCOPED_TRACE(device);
    out_.str("");
    err_.str("");
    LocalOptions options;
    options.device = device;
    options.bin_dir = MakeBinDir(2);
    options.run_dir = MakeTempDir("run");
    EXPECT_EQ(RunLocalNow(options), kExitUsage);
    EXPECT_THAT(err_.str(),
                AllOf(HasSubstr(absl::StrCat("--device: \"", device, "\"")),
                      HasSubstr("use cpu, or cuda")));
    EXPECT_THAT(out_.str(), Not(HasSubstr("pid")));
    EXPECT_THAT(StartedPids(options.run_dir, 2), ::testing::IsEmpty());
  }
}

TEST_F(LocalTest, WorkersFlagSetsWorldSize) {
  const std::string spec = absl::StrCat(MakeTempDir("spec"), "/job.json");
  std::ofstream(spec) << R"({"name": "three", "world_size": 2, "synthetic":
      {"num_parameters": 1000}, "optimizer": {"kind": "sgd",
      "hyper_parameters": {"lr": 0.1}}, "steps": 3, "output_dir": "out"})";
  LocalOptions options;
  options.spec_path = spec;
  options.workers = 3;
  options.base_dir = "/somewhere";
  options.bin_dir = MakeBinDir(3);
  options.run_dir = MakeTempDir("run");
  EXPECT_EQ(RunLocalNow(options), kExitOk) << out_.str() << err_.str();
  EXPECT_THAT(out_.str(),
              AllOf(HasSubstr("3 CPU workers"), HasSubstr("worker 2 "),
                    HasSubstr("3 steps on 3 workers"),
                    // A relative output_dir is the user's, not the cwd's.
                    HasSubstr("final parameters: /somewhere/out/params")));
  for (pid_t pid : StartedPids(options.run_dir, 3)) EXPECT_FALSE(ProcessAlive(pid));
}

TEST_F(LocalTest, InterruptStopsEverything) {
  LocalOptions options;
  options.bin_dir = MakeBinDir(2);
  options.run_dir = MakeTempDir("run");
  options.keep_running = true;  // Would never return without the interrupt.
  int code = -1;
  std::thread runner([&] { code = RunLocalNow(options); });
  const std::string last_port = absl::StrCat(options.run_dir, "/local-worker-1.port");
  struct stat st;
  WaitUntil([&] { return stat(last_port.c_str(), &st) == 0; },
            absl::Seconds(20));
  cancel_.Cancel();
  runner.join();
  // Interrupted while starting or watching (130), or after the job finished
  // in keep-running mode (0): either way everything is gone.
  EXPECT_THAT(code, ::testing::AnyOf(kExitInterrupted, kExitOk))
      << out_.str() << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("stopped 2 workers and the coordinator"));
  const std::vector<pid_t> pids = StartedPids(options.run_dir, 2);
  EXPECT_EQ(pids.size(), 3u);
  for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << "pid " << pid << " survived";
}

TEST_F(LocalTest, AWorkerThatDiesIsReportedWithItsLog) {
  LocalOptions options;
  options.bin_dir = MakeBinDir(2, /*worker_fails=*/true);
  options.run_dir = MakeTempDir("run");
  EXPECT_EQ(RunLocalNow(options), kExitError);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("pshard-worker 0"),
                                HasSubstr("exited with code 1"),
                                HasSubstr("cannot open device")));
  for (pid_t pid : StartedPids(options.run_dir, 2)) EXPECT_FALSE(ProcessAlive(pid));
}

TEST_F(LocalTest, MissingBinariesAreNamed) {
  LocalOptions options;
  options.bin_dir = MakeTempDir("empty-bin");
  options.run_dir = MakeTempDir("run");
  EXPECT_EQ(RunLocalNow(options), kExitError);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("cannot find pshard-coordinator"),
                                HasSubstr("--bin_dir")));
}

TEST_F(LocalTest, BadSpecExits2BeforeStartingAnything) {
  const std::string spec = absl::StrCat(MakeTempDir("spec"), "/bad.json");
  std::ofstream(spec) << R"({"name": "x", "world_size": 2, "steps": 0})";
  LocalOptions options;
  options.spec_path = spec;
  options.bin_dir = MakeTempDir("empty-bin");
  EXPECT_EQ(RunLocalNow(options), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("invalid job spec"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("pid")));
}

TEST_F(LocalTest, TimeoutThatIsNotPositiveExits2BeforeStartingAnything) {
  LocalOptions options;
  options.cli.rpc_timeout = absl::ZeroDuration();
  options.bin_dir = MakeBinDir(2);
  options.run_dir = MakeTempDir("run");
  EXPECT_EQ(RunLocalNow(options), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--rpc_timeout: must be positive, got 0"));
  EXPECT_THAT(StartedPids(options.run_dir, 2), ::testing::IsEmpty());
}

TEST_F(LocalTest, RunDirOfAnEarlierRunIsRefusedBeforeStartingAnything) {
  const std::string run_dir = MakeTempDir("earlier-run");
  std::ofstream(absl::StrCat(run_dir, "/coordinator.db")) << "state";
  std::ofstream(absl::StrCat(run_dir, "/coordinator.port")) << "4242\n";
  LocalOptions options;
  options.run_dir = run_dir;
  options.bin_dir = MakeBinDir(2);
  EXPECT_EQ(RunLocalNow(options), kExitUsage);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("--run_dir"),
                                HasSubstr(run_dir + "/coordinator.db")));
  EXPECT_THAT(out_.str(), Not(HasSubstr("pid")));
  EXPECT_THAT(StartedPids(run_dir, 2), ::testing::IsEmpty());
}

TEST(DefaultSpecTest, IsTheExampleFile) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec builtin, DefaultLocalJobSpec());
  std::ifstream in(RunfilePath("examples/mlp_adam_2workers.json"));
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_OK_AND_ASSIGN(v1::JobSpec example, ParseJobSpecJson(text.str()));
  EXPECT_EQ(builtin.SerializeAsString(), example.SerializeAsString());
  EXPECT_EQ(builtin.world_size(), 2);
  EXPECT_TRUE(builtin.has_mlp());
  EXPECT_EQ(builtin.optimizer().kind(), v1::OptimizerSpec::ADAM);
}

TEST(ResolveUserPathsTest, RelativePathsAreTheUsersAndAProgramRunsThere) {
  v1::JobSpec program;
  program.mutable_program()->add_argv("examples/torch_lm/train.py");
  ResolveUserPaths("/home/u/pshard", "/tmp/run", program);
  EXPECT_EQ(program.program().working_dir(), "/home/u/pshard");
  EXPECT_EQ(program.output_dir(), "/tmp/run/output");
  // A working_dir of the spec's own is kept, as is an absolute output_dir.
  program.mutable_program()->set_working_dir("/srv/job");
  program.set_output_dir("/data/out");
  ResolveUserPaths("/home/u/pshard", "/tmp/run", program);
  EXPECT_EQ(program.program().working_dir(), "/srv/job");
  EXPECT_EQ(program.output_dir(), "/data/out");

  v1::JobSpec replay;
  replay.set_output_dir("out");
  replay.mutable_replay()->set_params_path("data/params.safetensors");
  replay.mutable_replay()->set_gradients_dir("/abs/grads");
  ResolveUserPaths("/home/u", "/tmp/run", replay);
  EXPECT_EQ(replay.output_dir(), "/home/u/out");
  EXPECT_EQ(replay.replay().params_path(), "/home/u/data/params.safetensors");
  EXPECT_EQ(replay.replay().gradients_dir(), "/abs/grads");
}

TEST(FindSiblingBinaryTest, SearchOrder) {
  const std::string root = MakeTempDir("tree");
  mkdir(absl::StrCat(root, "/cli").c_str(), 0755);
  mkdir(absl::StrCat(root, "/server").c_str(), 0755);
  const std::string self = absl::StrCat(root, "/cli/pshardctl");
  WriteScript(absl::StrCat(root, "/server/pshard-coordinator"), "exit 0\n");
  // The bazel-bin layout: ../server/.
  ASSERT_OK_AND_ASSIGN(std::string found,
                       FindSiblingBinary("pshard-coordinator", "server", "", self));
  EXPECT_EQ(found, absl::StrCat(root, "/cli/../server/pshard-coordinator"));
  // A sibling wins over ../server/.
  WriteScript(absl::StrCat(root, "/cli/pshard-coordinator"), "exit 0\n");
  ASSERT_OK_AND_ASSIGN(found,
                       FindSiblingBinary("pshard-coordinator", "server", "", self));
  EXPECT_EQ(found, absl::StrCat(root, "/cli/pshard-coordinator"));
  // --bin_dir is the only place looked at when set.
  EXPECT_THAT(FindSiblingBinary("pshard-coordinator", "server",
                                absl::StrCat(root, "/nothing"), self),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nothing/")));
}

}  // namespace
}  // namespace pshard::cli
