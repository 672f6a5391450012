#include "security/certificates.h"

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::security {
namespace {

using ::testing::HasSubstr;

CertificateRequest Request(std::string name) {
  CertificateRequest r;
  r.common_name = std::move(name);
  r.dns_names = {"localhost"};
  r.ip_addresses = {"127.0.0.1", "::1"};
  r.not_before = absl::Now() - absl::Hours(1);
  r.not_after = absl::Now() + absl::Hours(1);
  return r;
}

TEST(CertificatesTest, IssuedCertificateMatchesItsKeyAndCarriesItsName) {
  ASSERT_OK_AND_ASSIGN(KeyAndCertificate ca,
                       MakeCertificateAuthority("test CA", absl::Now(),
                                                absl::Now() + absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(KeyAndCertificate leaf,
                       IssueCertificate(ca, Request("w-3")));
  EXPECT_OK(CheckKeyMatchesCertificate(leaf.key_pem, leaf.certificate_pem));
  EXPECT_OK(CheckKeyMatchesCertificate(ca.key_pem, ca.certificate_pem));
  EXPECT_THAT(CheckKeyMatchesCertificate(ca.key_pem, leaf.certificate_pem),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not the key of the certificate")));
  ASSERT_OK_AND_ASSIGN(std::string leaf_name,
                       CertificateCommonName(leaf.certificate_pem));
  EXPECT_EQ(leaf_name, "w-3");
  ASSERT_OK_AND_ASSIGN(std::string ca_name,
                       CertificateCommonName(ca.certificate_pem));
  EXPECT_EQ(ca_name, "test CA");
}

TEST(CertificatesTest, CountsABundleAndRefusesDamage) {
  ASSERT_OK_AND_ASSIGN(KeyAndCertificate a,
                       MakeCertificateAuthority("a", absl::Now(),
                                                absl::Now() + absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(KeyAndCertificate b,
                       MakeCertificateAuthority("b", absl::Now(),
                                                absl::Now() + absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(int count,
                       CountCertificates(a.certificate_pem + b.certificate_pem));
  EXPECT_EQ(count, 2);
  EXPECT_THAT(CountCertificates("not a certificate\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no PEM certificate")));
  std::string damaged = a.certificate_pem;
  damaged.erase(damaged.size() / 2, 64);  // a cut through the DER body
  EXPECT_THAT(CountCertificates(damaged),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(CertificatesTest, RefusesBadRequests) {
  ASSERT_OK_AND_ASSIGN(KeyAndCertificate ca,
                       MakeCertificateAuthority("ca", absl::Now(),
                                                absl::Now() + absl::Hours(1)));
  CertificateRequest bad_ip = Request("x");
  bad_ip.ip_addresses = {"300.1.1.1"};
  EXPECT_THAT(IssueCertificate(ca, bad_ip),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"300.1.1.1\" is not an IP address")));
  CertificateRequest no_name = Request("");
  EXPECT_THAT(IssueCertificate(ca, no_name),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("common name")));
  CertificateRequest backwards = Request("x");
  backwards.not_after = backwards.not_before - absl::Seconds(1);
  EXPECT_THAT(IssueCertificate(ca, backwards),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not after not_before")));
}

}  // namespace
}  // namespace pshard::security
