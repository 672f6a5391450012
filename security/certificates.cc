#include "security/certificates.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"

namespace pshard::security {
namespace {

// RFC 5280's ub-common-name.
constexpr size_t kMaxCommonNameBytes = 64;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct ExtensionFree {
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using Extension = std::unique_ptr<X509_EXTENSION, ExtensionFree>;

// The newest OpenSSL error, for messages ("what: error:...").
absl::Status OpenSslError(absl::string_view what) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  char text[256] = "no OpenSSL error recorded";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  return absl::InternalError(absl::StrCat(what, ": ", text));
}

absl::StatusOr<Pkey> NewKey() {
  Pkey key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("generating a P-256 key");
  return key;
}

absl::StatusOr<Pkey> ParseKey(absl::string_view pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) return OpenSslError("reading a PEM private key");
  return key;
}

absl::StatusOr<Certificate> ParseCertificate(absl::string_view pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Certificate cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) return OpenSslError("reading a PEM certificate");
  return cert;
}

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<KeyAndCertificate> ToPem(EVP_PKEY* key, X509* cert) {
  Bio key_bio(BIO_new(BIO_s_mem()));
  Bio cert_bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(key_bio.get(), key, nullptr, nullptr, 0,
                               nullptr, nullptr) != 1) {
    return OpenSslError("writing the private key");
  }
  if (PEM_write_bio_X509(cert_bio.get(), cert) != 1) {
    return OpenSslError("writing the certificate");
  }
  return KeyAndCertificate{BioContents(key_bio.get()),
                           BioContents(cert_bio.get())};
}

absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid,
                          const std::string& value) {
  Extension ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str()));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return OpenSslError(absl::StrCat("adding ", OBJ_nid2sn(nid), " = ", value));
  }
  return absl::OkStatus();
}

// A certificate for `subject_key` named `common_name`, with a random
// 128-bit serial, signed by `issuer_key` (self-signed when `issuer` is
// null). `extensions` are (nid, value) in openssl.cnf syntax.
absl::StatusOr<Certificate> Sign(
    EVP_PKEY* subject_key, absl::string_view common_name, absl::Time not_before,
    absl::Time not_after, X509* issuer, EVP_PKEY* issuer_key,
    const std::vector<std::pair<int, std::string>>& extensions) {
  if (common_name.empty()) {
    return absl::InvalidArgumentError("a certificate needs a common name");
  }
  if (common_name.size() > kMaxCommonNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "common name \"", common_name, "\" is longer than X.509's ",
        kMaxCommonNameBytes, " bytes"));
  }
  if (not_after <= not_before) {
    return absl::InvalidArgumentError(absl::StrCat(
        "certificate for ", common_name, ": not_after (",
        absl::FormatTime(not_after), ") is not after not_before (",
        absl::FormatTime(not_before), ")"));
  }
  Certificate cert(X509_new());
  if (cert == nullptr || X509_set_version(cert.get(), 2) != 1) {
    return OpenSslError("creating a certificate");
  }
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) {
    return OpenSslError("drawing a serial number");
  }
  serial[0] &= 0x7f;  // positive, as RFC 5280 asks
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial_bn(
      BN_bin2bn(serial, sizeof(serial), nullptr), &BN_free);
  if (serial_bn == nullptr ||
      BN_to_ASN1_INTEGER(serial_bn.get(),
                         X509_get_serialNumber(cert.get())) == nullptr) {
    return OpenSslError("setting the serial number");
  }
  if (ASN1_TIME_set(X509_getm_notBefore(cert.get()),
                    absl::ToTimeT(not_before)) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert.get()),
                    absl::ToTimeT(not_after)) == nullptr) {
    return OpenSslError("setting the validity window");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(
          name, "CN", MBSTRING_UTF8,
          reinterpret_cast<const unsigned char*>(common_name.data()),
          static_cast<int>(common_name.size()), -1, 0) != 1) {
    return OpenSslError("setting the common name");
  }
  if (issuer == nullptr) issuer = cert.get();
  if (issuer_key == nullptr) issuer_key = subject_key;
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer)) != 1 ||
      X509_set_pubkey(cert.get(), subject_key) != 1) {
    return OpenSslError("setting the issuer and public key");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : extensions) {
    RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, nid, value));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) {
    return OpenSslError("signing the certificate");
  }
  return cert;
}

}  // namespace

absl::StatusOr<KeyAndCertificate> MakeCertificateAuthority(
    absl::string_view common_name, absl::Time not_before,
    absl::Time not_after) {
  ASSIGN_OR_RETURN(Pkey key, NewKey());
  ASSIGN_OR_RETURN(
      Certificate cert,
      Sign(key.get(), common_name, not_before, not_after, nullptr, nullptr,
           {{NID_basic_constraints, "critical,CA:TRUE"},
            {NID_key_usage, "critical,keyCertSign,cRLSign"},
            {NID_subject_key_identifier, "hash"}}));
  return ToPem(key.get(), cert.get());
}

absl::StatusOr<KeyAndCertificate> IssueCertificate(
    const KeyAndCertificate& ca, const CertificateRequest& request) {
  ASSIGN_OR_RETURN(Pkey ca_key, ParseKey(ca.key_pem));
  ASSIGN_OR_RETURN(Certificate ca_cert, ParseCertificate(ca.certificate_pem));
  std::vector<std::string> names;
  for (const std::string& dns : request.dns_names) {
    if (dns.empty()) {
      return absl::InvalidArgumentError("an empty DNS name in a certificate");
    }
    names.push_back(absl::StrCat("DNS:", dns));
  }
  for (const std::string& ip : request.ip_addresses) {
    // X509V3_EXT_conf_nid rejects a bad address, but says only "bad IP
    // address"; check here to name it.
    ASN1_OCTET_STRING* parsed = a2i_IPADDRESS(ip.c_str());
    ASN1_OCTET_STRING_free(parsed);
    if (parsed == nullptr) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("\"", ip, "\" is not an IP address"));
    }
    names.push_back(absl::StrCat("IP:", ip));
  }
  std::vector<std::pair<int, std::string>> extensions = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
      {NID_ext_key_usage, "serverAuth,clientAuth"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid"}};
  if (!names.empty()) {
    extensions.push_back({NID_subject_alt_name, absl::StrJoin(names, ",")});
  }
  ASSIGN_OR_RETURN(Pkey key, NewKey());
  ASSIGN_OR_RETURN(Certificate cert,
                   Sign(key.get(), request.common_name, request.not_before,
                        request.not_after, ca_cert.get(), ca_key.get(),
                        extensions));
  return ToPem(key.get(), cert.get());
}

absl::StatusOr<std::string> CertificateCommonName(
    absl::string_view certificate_pem) {
  ASSIGN_OR_RETURN(Certificate cert, ParseCertificate(certificate_pem));
  char name[256];
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()),
                                          NID_commonName, name, sizeof(name));
  if (n < 0) {
    return absl::InvalidArgumentError("the certificate has no common name");
  }
  return std::string(name, static_cast<size_t>(n));
}

absl::Status CheckKeyMatchesCertificate(absl::string_view key_pem,
                                        absl::string_view certificate_pem) {
  absl::StatusOr<Pkey> key = ParseKey(key_pem);
  if (!key.ok()) return absl::InvalidArgumentError(key.status().message());
  absl::StatusOr<Certificate> cert = ParseCertificate(certificate_pem);
  if (!cert.ok()) return absl::InvalidArgumentError(cert.status().message());
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the private key is not the key of the certificate");
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CountCertificates(absl::string_view bundle_pem) {
  Bio bio(BIO_new_mem_buf(bundle_pem.data(),
                          static_cast<int>(bundle_pem.size())));
  int count = 0;
  while (true) {
    Certificate cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    ++count;
  }
  // The loop ends on "no start line" at the end of the data; anything else
  // is a damaged certificate.
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code != 0 && ERR_GET_REASON(code) != PEM_R_NO_START_LINE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "certificate ", count + 1, " does not parse: ",
        ERR_reason_error_string(code) ? ERR_reason_error_string(code) : "?"));
  }
  if (count == 0) {
    return absl::InvalidArgumentError("holds no PEM certificate");
  }
  return count;
}

absl::Status WriteKeyAndCertificate(const std::string& dir,
                                    absl::string_view name,
                                    const KeyAndCertificate& pair) {
  RETURN_IF_ERROR(checkpoint::WriteFileAtomically(
      absl::StrCat(dir, "/", name, ".key"), pair.key_pem));
  return checkpoint::WriteFileAtomically(absl::StrCat(dir, "/", name, ".crt"),
                                         pair.certificate_pem);
}

}  // namespace pshard::security
