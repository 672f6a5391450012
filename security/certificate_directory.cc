#include "security/certificate_directory.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::security {

absl::StatusOr<CertificateDirectory> CertificateDirectory::Create(
    const std::string& dir, const std::string& ca_name, absl::Time now,
    absl::Duration lifetime) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  CertificateDirectory c;
  c.dir_ = dir;
  c.not_before_ = now - absl::Minutes(5);
  c.not_after_ = now + lifetime;
  ASSIGN_OR_RETURN(c.ca_, MakeCertificateAuthority(ca_name, c.not_before_,
                                                   c.not_after_));
  RETURN_IF_ERROR(WriteKeyAndCertificate(dir, "ca", c.ca_));
  return c;
}

absl::StatusOr<TransportSecurity> CertificateDirectory::Issue(
    const std::string& name) {
  CertificateRequest request;
  request.common_name = name;
  request.dns_names = {"localhost"};
  request.ip_addresses = {"127.0.0.1"};
  request.not_before = not_before_;
  request.not_after = not_after_;
  ASSIGN_OR_RETURN(KeyAndCertificate pair, IssueCertificate(ca_, request));
  RETURN_IF_ERROR(WriteKeyAndCertificate(dir_, name, pair));
  TransportSecurity s;
  s.certificate_file = absl::StrCat(dir_, "/", name, ".crt");
  s.key_file = absl::StrCat(dir_, "/", name, ".key");
  s.ca_file = ca_file();
  return s;
}

}  // namespace pshard::security
