#include "checkpoint/sha256.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"

namespace pshard::checkpoint {

struct Sha256::Context {
  struct Free {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx;
};

Sha256::Sha256(std::unique_ptr<Context> context) : context_(std::move(context)) {}
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;
Sha256::~Sha256() = default;

absl::StatusOr<Sha256> Sha256::Create() {
  auto context = std::make_unique<Context>();
  context->ctx.reset(EVP_MD_CTX_new());
  if (context->ctx == nullptr ||
      EVP_DigestInit_ex(context->ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("OpenSSL cannot initialise a SHA-256 digest");
  }
  return Sha256(std::move(context));
}

void Sha256::Update(absl::string_view bytes) {
  // EVP_DigestUpdate fails only on a context that was never initialised,
  // which Create() rules out.
  EVP_DigestUpdate(context_->ctx.get(), bytes.data(), bytes.size());
}

std::string Sha256::FinishHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_->ctx.get(), digest, &length);
  EVP_DigestInit_ex(context_->ctx.get(), EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(digest), length));
}

absl::StatusOr<FileDigest> DigestFile(const std::string& path) {
  ASSIGN_OR_RETURN(OpenFile file, OpenRegularFile(path));
  ASSIGN_OR_RETURN(Sha256 hash, Sha256::Create());
  std::vector<char> buffer(4 << 20);
  FileDigest digest;
  while (true) {
    const ssize_t got = ::read(file.fd.get(), buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path, errno);
    }
    if (got == 0) break;
    hash.Update(absl::string_view(buffer.data(), static_cast<size_t>(got)));
    digest.size_bytes += got;
  }
  digest.sha256 = hash.FinishHex();
  return digest;
}

bool IsSha256Hex(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  return true;
}

}  // namespace pshard::checkpoint
