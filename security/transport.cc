#include "security/transport.h"

#include <limits.h>
#include <unistd.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "security/certificates.h"

namespace pshard::security {
namespace {

constexpr int64_t kMaxPemBytes = int64_t{1} << 20;

// Adds "authorization: Bearer <token>" to every call's initial metadata.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(std::shared_ptr<const std::string> header)
      : header_(std::move(header)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  // Shared with the factory: a call may outlive the channel object.
  const std::shared_ptr<const std::string> header_;
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(absl::string_view token)
      : header_(std::make_shared<const std::string>(
            absl::StrCat("Bearer ", token))) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(header_);
  }

 private:
  const std::shared_ptr<const std::string> header_;
};

absl::StatusOr<std::string> ReadPem(absl::string_view flag,
                                    const std::string& path) {
  absl::StatusOr<std::string> pem = checkpoint::ReadSmallFile(path, kMaxPemBytes);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", pem.status().message()));
  }
  return pem;
}

absl::Status Invalid(absl::string_view flag, const std::string& path,
                     absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " '", path, "': ", problem));
}

// The checks both ends share: no TLS file with --insecure; a certificate and
// its key come together and match; the CA bundle parses.
absl::Status ValidateCommon(const TransportSecurity& s) {
  if (s.insecure) {
    for (const auto& [flag, value] :
         {std::pair<absl::string_view, const std::string&>{"tls_cert",
                                                          s.certificate_file},
          {"tls_key", s.key_file},
          {"tls_ca", s.ca_file},
          {"tls_server_name", s.server_name}}) {
      if (!value.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--insecure and --", flag,
            " contradict each other: --insecure turns TLS off"));
      }
    }
    if (s.require_client_certificate) {
      return absl::InvalidArgumentError(
          "--insecure and --tls_require_client_cert contradict each other");
    }
    return absl::OkStatus();
  }
  if (s.certificate_file.empty() != s.key_file.empty()) {
    return absl::InvalidArgumentError(
        s.key_file.empty() ? "--tls_cert needs --tls_key (its private key)"
                           : "--tls_key needs --tls_cert (its certificate)");
  }
  if (s.reload_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_reload_interval must be at least 1s, not ",
                     absl::FormatDuration(s.reload_interval)));
  }
  if (!s.certificate_file.empty()) {
    ASSIGN_OR_RETURN(std::string cert, ReadPem("tls_cert", s.certificate_file));
    ASSIGN_OR_RETURN(std::string key, ReadPem("tls_key", s.key_file));
    if (absl::StatusOr<int> n = CountCertificates(cert); !n.ok()) {
      return Invalid("tls_cert", s.certificate_file, n.status().message());
    }
    if (absl::Status match = CheckKeyMatchesCertificate(key, cert);
        !match.ok()) {
      return Invalid("tls_key", s.key_file,
                     absl::StrCat(match.message(), " '", s.certificate_file,
                                  "'"));
    }
  }
  if (!s.ca_file.empty()) {
    ASSIGN_OR_RETURN(std::string ca, ReadPem("tls_ca", s.ca_file));
    if (absl::StatusOr<int> n = CountCertificates(ca); !n.ok()) {
      return Invalid("tls_ca", s.ca_file, n.status().message());
    }
  }
  return absl::OkStatus();
}

unsigned int RefreshSeconds(const TransportSecurity& s) {
  return static_cast<unsigned int>(absl::ToInt64Seconds(s.reload_interval));
}

}  // namespace

TransportSecurity Plaintext() {
  TransportSecurity s;
  s.insecure = true;
  return s;
}

absl::Status ValidateServerSecurity(const TransportSecurity& s) {
  RETURN_IF_ERROR(ValidateCommon(s));
  if (s.insecure) return absl::OkStatus();
  if (s.certificate_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs --tls_cert and --tls_key (a certificate and its key); "
        "pass --insecure for plaintext");
  }
  if (s.require_client_certificate && s.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_require_client_cert needs --tls_ca (the CA that signs client "
        "certificates)");
  }
  if (!s.server_name.empty()) {
    return absl::InvalidArgumentError(
        "--tls_server_name is for clients; a server's names are in its "
        "certificate");
  }
  return absl::OkStatus();
}

absl::Status ValidateClientSecurity(const TransportSecurity& s) {
  RETURN_IF_ERROR(ValidateCommon(s));
  if (s.require_client_certificate) {
    return absl::InvalidArgumentError(
        "--tls_require_client_cert is for servers");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TransportSecurity& s) {
  RETURN_IF_ERROR(ValidateServerSecurity(s));
  if (s.insecure) return grpc::InsecureServerCredentials();
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          s.key_file, s.certificate_file, s.ca_file, RefreshSeconds(s));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!s.ca_file.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(
        s.require_client_certificate
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> NewChannel(
    const std::string& address, const TransportSecurity& s,
    grpc::ChannelArguments args) {
  RETURN_IF_ERROR(ValidateClientSecurity(s));
  // The token rides an interceptor rather than call credentials: gRPC sends
  // call credentials over TLS only, and a plaintext channel behind a service
  // mesh (or on loopback) needs it too.
  auto channel = [&](std::shared_ptr<grpc::ChannelCredentials> credentials) {
    std::vector<std::unique_ptr<
        grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    if (!s.bearer_token.empty()) {
      interceptors.push_back(
          std::make_unique<BearerTokenInterceptorFactory>(s.bearer_token));
    }
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        address, credentials, args, std::move(interceptors));
  };
  if (s.insecure) return channel(grpc::InsecureChannelCredentials());
  grpc::experimental::TlsChannelCredentialsOptions options;
  if (!s.ca_file.empty() || !s.certificate_file.empty()) {
    options.set_certificate_provider(
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            s.key_file, s.certificate_file, s.ca_file, RefreshSeconds(s)));
    if (!s.ca_file.empty()) options.watch_root_certs();
    if (!s.certificate_file.empty()) options.watch_identity_key_cert_pairs();
  }
  if (!s.server_name.empty()) {
    args.SetSslTargetNameOverride(s.server_name);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::experimental::TlsCredentials(options);
  if (credentials == nullptr) {
    return absl::InternalError("gRPC refused the TLS channel settings");
  }
  return channel(credentials);
}

std::string ListenAddress(const std::string& flag_value, int default_port,
                          const TransportSecurity& s) {
  if (!flag_value.empty()) return flag_value;
  return absl::StrCat(s.insecure ? "127.0.0.1" : "0.0.0.0", ":", default_port);
}

namespace {

constexpr char kInsecureVariable[] = "PSHARD_INSECURE";
constexpr char kCaVariable[] = "PSHARD_TLS_CA";
constexpr char kCertificateVariable[] = "PSHARD_TLS_CERT";
constexpr char kKeyVariable[] = "PSHARD_TLS_KEY";
constexpr char kServerNameVariable[] = "PSHARD_TLS_SERVER_NAME";
constexpr char kTokenVariable[] = "PSHARD_TOKEN";

std::string AbsolutePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return absl::StrCat(cwd, "/", path);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ClientSecurityEnvironment(
    const TransportSecurity& s) {
  std::vector<std::pair<std::string, std::string>> env;
  if (!s.bearer_token.empty()) env.emplace_back(kTokenVariable, s.bearer_token);
  if (s.insecure) {
    env.emplace_back(kInsecureVariable, "1");
    return env;
  }
  for (const auto& [name, value] :
       {std::pair<const char*, std::string>{kCaVariable, AbsolutePath(s.ca_file)},
        {kCertificateVariable, AbsolutePath(s.certificate_file)},
        {kKeyVariable, AbsolutePath(s.key_file)},
        {kServerNameVariable, s.server_name}}) {
    if (!value.empty()) env.emplace_back(name, value);
  }
  return env;
}

TransportSecurity ClientSecurityFromEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) {
    const char* value = getenv(name);
    return std::string(value == nullptr ? "" : value);
  };
  TransportSecurity s;
  s.insecure = get(kInsecureVariable) == "1";
  s.ca_file = get(kCaVariable);
  s.certificate_file = get(kCertificateVariable);
  s.key_file = get(kKeyVariable);
  s.server_name = get(kServerNameVariable);
  s.bearer_token = get(kTokenVariable);
  return s;
}

}  // namespace pshard::security
