// A CA made for one cluster and the certificates it issues, kept as files in
// one directory (mode 0700): how `pshardctl local` is secure by default, and
// how multi-process tests run a cluster under mutual TLS.
#ifndef PSHARD_SECURITY_CERTIFICATE_DIRECTORY_H_
#define PSHARD_SECURITY_CERTIFICATE_DIRECTORY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "security/certificates.h"
#include "security/transport.h"

namespace pshard::security {

class CertificateDirectory {
 public:
  // Creates `dir` if needed and writes a new CA to dir/ca.{crt,key}, valid
  // from a few minutes before `now` (clock skew between processes) for
  // `lifetime`.
  static absl::StatusOr<CertificateDirectory> Create(
      const std::string& dir, const std::string& ca_name, absl::Time now,
      absl::Duration lifetime);

  // Issues `name`'s certificate (common name `name`, for 127.0.0.1 and
  // localhost) to dir/<name>.{crt,key}, replacing any earlier one, and
  // returns the settings that present it and trust the CA.
  absl::StatusOr<TransportSecurity> Issue(const std::string& name);

  const std::string& dir() const { return dir_; }
  std::string ca_file() const { return dir_ + "/ca.crt"; }

 private:
  std::string dir_;
  KeyAndCertificate ca_;
  absl::Time not_before_;
  absl::Time not_after_;
};

}  // namespace pshard::security

#endif  // PSHARD_SECURITY_CERTIFICATE_DIRECTORY_H_
