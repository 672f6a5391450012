#include "security/transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"
#include "gtest/gtest.h"
#include "security/certificates.h"

namespace pshard::security {
namespace {

using ::testing::HasSubstr;

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = absl::StrCat(::testing::TempDir(), "/transport_test_", getpid(), "_",
                        counter++);
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
    ASSERT_OK_AND_ASSIGN(ca_, MakeCertificateAuthority("pshard test CA", Ago(1),
                                                       FromNow(24)));
    ASSERT_OK_AND_ASSIGN(other_ca_,
                         MakeCertificateAuthority("someone else's CA", Ago(1),
                                                  FromNow(24)));
    ASSERT_OK(WriteCa("ca", ca_));
    ASSERT_OK(WriteCa("other-ca", other_ca_));
    ASSERT_OK(Issue(ca_, "server", {"127.0.0.1"}, Ago(1), FromNow(24)));
    ASSERT_OK(Issue(ca_, "client", {}, Ago(1), FromNow(24)));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  static absl::Time Ago(int hours) { return absl::Now() - absl::Hours(hours); }
  static absl::Time FromNow(int hours) {
    return absl::Now() + absl::Hours(hours);
  }
  std::string Path(absl::string_view name) const {
    return absl::StrCat(dir_, "/", name);
  }
  absl::Status WriteCa(absl::string_view name, const KeyAndCertificate& ca) {
    return WriteKeyAndCertificate(dir_, name, ca);
  }
  absl::Status Issue(const KeyAndCertificate& ca, absl::string_view name,
                     std::vector<std::string> ips, absl::Time not_before,
                     absl::Time not_after,
                     std::vector<std::string> dns = {}) {
    CertificateRequest request;
    request.common_name = std::string(name);
    request.ip_addresses = std::move(ips);
    request.dns_names = std::move(dns);
    request.not_before = not_before;
    request.not_after = not_after;
    absl::StatusOr<KeyAndCertificate> pair = IssueCertificate(ca, request);
    if (!pair.ok()) return pair.status();
    return WriteKeyAndCertificate(dir_, name, *pair);
  }

  TransportSecurity ServerTls(absl::string_view name = "server") const {
    TransportSecurity s;
    s.certificate_file = Path(absl::StrCat(name, ".crt"));
    s.key_file = Path(absl::StrCat(name, ".key"));
    s.reload_interval = absl::Seconds(1);
    return s;
  }
  TransportSecurity ClientTls(absl::string_view ca = "ca") const {
    TransportSecurity s;
    s.ca_file = Path(absl::StrCat(ca, ".crt"));
    return s;
  }

  // A server on 127.0.0.1 with gRPC's health service, the smallest real RPC.
  void StartServer(const TransportSecurity& security) {
    grpc::EnableDefaultHealthCheckService(true);
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        ServerCredentials(security);
    ASSERT_OK(credentials.status());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", *credentials, &port_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  // One health check over a new channel.
  absl::Status Check(const TransportSecurity& security) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        NewChannel(absl::StrCat("127.0.0.1:", port_), security);
    if (!channel.ok()) return channel.status();
    auto stub = grpc::health::v1::Health::NewStub(*channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = stub->Check(&context, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return absl::OkStatus();
  }

  std::string dir_;
  KeyAndCertificate ca_;
  KeyAndCertificate other_ca_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(TransportTest, TlsClientTrustingTheCaConnects) {
  StartServer(ServerTls());
  EXPECT_OK(Check(ClientTls()));
}

TEST_F(TransportTest, ClientTrustingAnotherCaIsRefused) {
  StartServer(ServerTls());
  EXPECT_THAT(Check(ClientTls("other-ca")),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST_F(TransportTest, PlaintextClientCannotTalkToATlsServer) {
  StartServer(ServerTls());
  TransportSecurity plaintext;
  plaintext.insecure = true;
  EXPECT_THAT(Check(plaintext),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST_F(TransportTest, ExpiredServerCertificateIsRefused) {
  ASSERT_OK(Issue(ca_, "expired", {"127.0.0.1"}, Ago(48), Ago(24)));
  StartServer(ServerTls("expired"));
  EXPECT_THAT(Check(ClientTls()),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST_F(TransportTest, CertificateForAnotherNameNeedsTheServerNameOverride) {
  ASSERT_OK(Issue(ca_, "named", {}, Ago(1), FromNow(1),
                  {"pshard-coordinator.pshard.svc"}));
  StartServer(ServerTls("named"));
  // Dialled by IP, the certificate's DNS name does not match.
  EXPECT_THAT(Check(ClientTls()),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  TransportSecurity by_name = ClientTls();
  by_name.server_name = "pshard-coordinator.pshard.svc";
  EXPECT_OK(Check(by_name));
}

TEST_F(TransportTest, MutualTlsRequiresAValidClientCertificateFromTheCa) {
  TransportSecurity server = ServerTls();
  server.ca_file = Path("ca.crt");
  server.require_client_certificate = true;
  StartServer(server);

  EXPECT_THAT(Check(ClientTls()),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  TransportSecurity with_cert = ClientTls();
  with_cert.certificate_file = Path("client.crt");
  with_cert.key_file = Path("client.key");
  EXPECT_OK(Check(with_cert));

  ASSERT_OK(Issue(ca_, "expired-client", {}, Ago(48), Ago(24)));
  TransportSecurity expired = ClientTls();
  expired.certificate_file = Path("expired-client.crt");
  expired.key_file = Path("expired-client.key");
  EXPECT_THAT(Check(expired),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));

  ASSERT_OK(Issue(other_ca_, "stranger", {}, Ago(1), FromNow(1)));
  TransportSecurity stranger = ClientTls();
  stranger.certificate_file = Path("stranger.crt");
  stranger.key_file = Path("stranger.key");
  EXPECT_THAT(Check(stranger),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

// Kubernetes rewrites a mounted secret in place; the server must present the
// new certificate without a restart. The new one comes from a different CA,
// so a client that trusts only that CA connects once the server reloaded.
TEST_F(TransportTest, RotatedServerCertificateIsServedWithoutARestart) {
  StartServer(ServerTls());
  ASSERT_OK(Check(ClientTls()));
  ASSERT_THAT(Check(ClientTls("other-ca")),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));

  ASSERT_OK(Issue(other_ca_, "server", {"127.0.0.1"}, Ago(1), FromNow(1)));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::Status status;
  do {
    status = Check(ClientTls("other-ca"));
  } while (!status.ok() && absl::Now() < deadline);
  EXPECT_OK(status) << "the server still presents the old certificate 30 s "
                       "after the files changed (reload interval 1 s)";
  EXPECT_THAT(Check(ClientTls()),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST_F(TransportTest, PlaintextOnlyWhenAskedForAndThenOnLoopback) {
  TransportSecurity plaintext;
  plaintext.insecure = true;
  StartServer(plaintext);
  EXPECT_OK(Check(plaintext));
  EXPECT_EQ(ListenAddress("", 7070, plaintext), "127.0.0.1:7070");
  EXPECT_EQ(ListenAddress("", 7070, ServerTls()), "0.0.0.0:7070");
  EXPECT_EQ(ListenAddress("0.0.0.0:9", 7070, plaintext), "0.0.0.0:9");
}

TEST_F(TransportTest, MistakesFailAtStartUpNamingTheFlag) {
  EXPECT_THAT(ValidateServerSecurity(TransportSecurity{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("TLS needs --tls_cert and --tls_key")));
  TransportSecurity both = ServerTls();
  both.insecure = true;
  EXPECT_THAT(ValidateServerSecurity(both),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--insecure and --tls_cert")));
  TransportSecurity no_key = ServerTls();
  no_key.key_file.clear();
  EXPECT_THAT(ValidateServerSecurity(no_key),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--tls_cert needs --tls_key")));
  TransportSecurity missing = ServerTls("absent");
  EXPECT_THAT(ValidateServerSecurity(missing),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--tls_cert")));
  TransportSecurity wrong_key = ServerTls();
  wrong_key.key_file = Path("client.key");
  EXPECT_THAT(ValidateServerSecurity(wrong_key),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not the key of the certificate")));
  TransportSecurity key_as_ca = ClientTls();
  key_as_ca.ca_file = Path("ca.key");
  EXPECT_THAT(ValidateClientSecurity(key_as_ca),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--tls_ca")));
  TransportSecurity mtls_without_ca = ServerTls();
  mtls_without_ca.require_client_certificate = true;
  EXPECT_THAT(ValidateServerSecurity(mtls_without_ca),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("needs --tls_ca")));
  // A client with no TLS flags uses the system's roots: valid.
  EXPECT_OK(ValidateClientSecurity(TransportSecurity{}));
}

}  // namespace
}  // namespace pshard::security
