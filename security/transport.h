// Transport security for every pshard gRPC server and client: TLS with
// certificates and keys read from files and re-read when they change
// (Kubernetes rotates a mounted secret in place; gRPC's file-watcher
// certificate provider picks the new files up without a restart), mutual
// TLS as an option, and plaintext only when asked for by name (--insecure).
#ifndef PSHARD_SECURITY_TRANSPORT_H_
#define PSHARD_SECURITY_TRANSPORT_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace pshard::security {

struct TransportSecurity {
  // Plaintext: no TLS at all. Servers then default to a loopback address.
  bool insecure = false;
  // This process's PEM certificate chain and private key. A server needs
  // both; a client presents them (mutual TLS) when given.
  std::string certificate_file;
  std::string key_file;
  // PEM CA bundle. Clients verify servers against it (the system's roots
  // when empty); servers verify client certificates against it.
  std::string ca_file;
  // Server: refuse clients that present no certificate signed by ca_file.
  // Without it a server with ca_file still verifies a certificate a client
  // chooses to present.
  bool require_client_certificate = false;
  // Client: the name the server's certificate must carry, when it is not the
  // host part of the address dialled (a certificate for a Service's DNS name
  // dialled by IP, or one certificate shared by every worker).
  std::string server_name;
  // How often the files are checked for changes.
  absl::Duration reload_interval = absl::Seconds(10);
  // Client: sent as "authorization: Bearer <token>" on every call, when set
  // (--token_file, $PSHARD_TOKEN): the server's --auth_tokens maps it to a
  // principal and its roles (docs/security.md). Carried over TLS and, for a
  // plaintext channel, as it is (a service mesh's own TLS, or loopback).
  std::string bearer_token;
};

// Plaintext settings (insecure = true), for loopback servers and clients in
// tests and the --insecure path.
TransportSecurity Plaintext();

// InvalidArgument naming the flag when the settings contradict each other
// (--insecure with a --tls_* flag, a key without a certificate); for a
// server, also when TLS has no certificate. Reads every named file and
// checks that the key matches the certificate and that the CA bundle parses,
// so a mistake fails at start-up instead of as a failed handshake later.
absl::Status ValidateServerSecurity(const TransportSecurity& security);
absl::Status ValidateClientSecurity(const TransportSecurity& security);

// Credentials for ServerBuilder::AddListeningPort, after
// ValidateServerSecurity.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TransportSecurity& security);

// A channel to `address` with ValidateClientSecurity's checks; `args` are
// the caller's channel arguments (the server-name override is added).
absl::StatusOr<std::shared_ptr<grpc::Channel>> NewChannel(
    const std::string& address, const TransportSecurity& security,
    grpc::ChannelArguments args = grpc::ChannelArguments());

// The address a server listens on: `flag_value` when set, otherwise
// 0.0.0.0:<default_port> with TLS and 127.0.0.1:<default_port> in
// plaintext, so a plaintext server is reachable only from its own host
// unless its operator says otherwise.
std::string ListenAddress(const std::string& flag_value, int default_port,
                          const TransportSecurity& security);

// A client's settings as environment variables for a child process (a
// program job's ranks call the coordinator themselves): PSHARD_INSECURE=1,
// or PSHARD_TLS_CA, PSHARD_TLS_CERT, PSHARD_TLS_KEY, PSHARD_TLS_SERVER_NAME
// for those that are set, and PSHARD_TOKEN for a bearer token (either
// way). Relative paths are made absolute, since the child runs in another
// directory.
std::vector<std::pair<std::string, std::string>> ClientSecurityEnvironment(
    const TransportSecurity& security);

// The inverse of ClientSecurityEnvironment, read through `getenv`. With none
// of the variables set: TLS against the system's roots.
TransportSecurity ClientSecurityFromEnvironment(
    const std::function<const char*(const char*)>& getenv);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_TRANSPORT_H_
