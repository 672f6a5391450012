// Transport security end to end through the real binaries: a coordinator and
// two workers under mutual TLS (tests/testing/cluster.h, tls = true) run a
// job while every certificate is replaced in place, as Kubernetes rotates a
// mounted secret. The job keeps training, the coordinator presents its new
// certificate to new connections without a restart, and a worker that
// restarts on its rotated certificate registers again.
#include <signal.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "security/transport.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

v1::JobSpec RunsUntilCancelled() {
  v1::JobSpec spec;
  spec.set_name("rotation");
  spec.set_world_size(2);
  spec.mutable_synthetic()->set_num_parameters(20000);
  spec.mutable_synthetic()->set_tensor_numel(2000);
  spec.set_steps(100000000);
  spec.set_progress_every(1);
  spec.set_collective_timeout_seconds(60);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  return spec;
}

// The certificate the server at `address` presents to a new connection
// (PEM), through a health check.
absl::StatusOr<std::string> PresentedCertificate(
    const std::string& address, const security::TransportSecurity& security) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      security::NewChannel(address, security);
  if (!channel.ok()) return channel.status();
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status =
      stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) {
    return absl::UnavailableError(status.error_message());
  }
  std::vector<grpc::string_ref> pem =
      context.auth_context()->FindPropertyValues("x509_pem_cert");
  if (pem.empty()) return absl::InternalError("no peer certificate");
  return std::string(pem[0].data(), pem[0].size());
}

int64_t Step(Cluster& cluster, const std::string& id) {
  absl::StatusOr<v1::Job> job = cluster.GetJob(id);
  return job.ok() ? job->progress().step() : -1;
}

TEST(TlsE2eTest, CertificatesRotateUnderARunningJob) {
  ClusterOptions options;
  options.workers = 2;
  options.tls = true;
  options.tls_reload_interval = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Cluster> cluster, Cluster::Start(options));

  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(RunsUntilCancelled()));
  ASSERT_TRUE(WaitUntil([&] { return Step(*cluster, job.id()) >= 3; },
                        absl::Seconds(60)))
      << cluster->Logs();
  ASSERT_OK_AND_ASSIGN(
      std::string before,
      PresentedCertificate(cluster->address(), cluster->client_security()));

  // Every certificate replaced in place (new keys, same CA and names).
  security::CertificateDirectory& certificates = *cluster->certificates();
  for (const char* name :
       {"pshard-coordinator", "worker-0", "worker-1", "pshardctl"}) {
    ASSERT_OK(certificates.Issue(name).status()) << name;
  }
  const std::string rotated =
      ReadFile(certificates.dir() + "/pshard-coordinator.crt");
  ASSERT_NE(rotated, before);

  // New connections get the new certificate, without a restart.
  std::string presented;
  EXPECT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<std::string> pem = PresentedCertificate(
            cluster->address(), cluster->client_security());
        presented = pem.ok() ? *pem : "";
        return presented == rotated;
      },
      absl::Seconds(30)))
      << "the coordinator still presents its old certificate";

  // The job keeps training through it.
  const int64_t at_rotation = Step(*cluster, job.id());
  EXPECT_TRUE(WaitUntil(
      [&] { return Step(*cluster, job.id()) >= at_rotation + 5; },
      absl::Seconds(60)))
      << cluster->Logs();
  ASSERT_OK_AND_ASSIGN(v1::Job running, cluster->GetJob(job.id()));
  EXPECT_EQ(running.state(), v1::RUNNING) << running.reason();

  // A worker's own status server presents its new certificate too.
  const std::string worker_rotated =
      ReadFile(certificates.dir() + "/worker-0.crt");
  EXPECT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<std::string> pem = PresentedCertificate(
            cluster->worker_status_address(0), cluster->client_security());
        return pem.ok() && *pem == worker_rotated;
      },
      absl::Seconds(30)))
      << "worker 0 still presents its old certificate";

  ASSERT_OK(cluster->Cancel(job.id()).status());
  ASSERT_OK_AND_ASSIGN(v1::Job ended,
                       cluster->WaitForEnd(job.id(), absl::Seconds(60)));
  EXPECT_EQ(ended.state(), v1::CANCELLED) << ended.reason();
}

}  // namespace
}  // namespace pshard::testing
