// X.509 certificates for pshard's own TLS: a certificate authority and the
// certificates it issues, as PEM. `pshardctl local` makes a CA, a server
// certificate and client certificates in its run directory so the demo
// cluster is secure by default; tests make expired and wrong-CA certificates
// with it. Production clusters bring their own (cert-manager, see
// docs/security.md). Keys are ECDSA P-256, signatures SHA-256 (OpenSSL).
#ifndef PSHARD_SECURITY_CERTIFICATES_H_
#define PSHARD_SECURITY_CERTIFICATES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pshard::security {

// A private key and its certificate, both PEM.
struct KeyAndCertificate {
  std::string key_pem;
  std::string certificate_pem;
};

struct CertificateRequest {
  std::string common_name;
  // subjectAltName entries; gRPC checks the server's against the name the
  // client dialled (or --tls_server_name).
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  absl::Time not_before;
  absl::Time not_after;
};

// A self-signed CA certificate (basicConstraints CA:TRUE, keyCertSign).
absl::StatusOr<KeyAndCertificate> MakeCertificateAuthority(
    absl::string_view common_name, absl::Time not_before,
    absl::Time not_after);

// A leaf certificate signed by `ca`, good for both serverAuth and clientAuth
// (a worker is a server for its status RPCs and a client of the
// coordinator). InvalidArgument for an empty name, a bad IP address or an
// empty validity window.
absl::StatusOr<KeyAndCertificate> IssueCertificate(
    const KeyAndCertificate& ca, const CertificateRequest& request);

// The subject common name of a PEM certificate (the mTLS identity).
absl::StatusOr<std::string> CertificateCommonName(
    absl::string_view certificate_pem);

// InvalidArgument unless `key_pem` is a private key and `certificate_pem`
// starts with the certificate of its public key.
absl::Status CheckKeyMatchesCertificate(absl::string_view key_pem,
                                        absl::string_view certificate_pem);

// The number of certificates in a PEM bundle; InvalidArgument when it holds
// none or one does not parse.
absl::StatusOr<int> CountCertificates(absl::string_view bundle_pem);

// Writes `<dir>/<name>.key` and `<dir>/<name>.crt`, both mode 0600, each
// through a temporary file and rename so a process watching the files never
// reads half of one. The key is written first: a watcher that sees the new
// certificate also finds its key.
absl::Status WriteKeyAndCertificate(const std::string& dir,
                                    absl::string_view name,
                                    const KeyAndCertificate& pair);

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_CERTIFICATES_H_
