// SHA-256 through OpenSSL's EVP interface, fed incrementally so a file is
// hashed while it is written (or read) without a second copy in memory.
#ifndef PSHARD_CHECKPOINT_SHA256_H_
#define PSHARD_CHECKPOINT_SHA256_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard::checkpoint {

class Sha256 {
 public:
  // Internal if OpenSSL cannot set up the digest.
  static absl::StatusOr<Sha256> Create();

  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  ~Sha256();

  void Update(absl::string_view bytes);
  // The digest of everything passed to Update, as 64 lowercase hex digits.
  // The object is reset afterwards.
  std::string FinishHex();

 private:
  struct Context;
  explicit Sha256(std::unique_ptr<Context> context);
  std::unique_ptr<Context> context_;
};

// The size and SHA-256 of a whole file, read in 4 MiB pieces.
struct FileDigest {
  int64_t size_bytes = 0;
  std::string sha256;  // 64 lowercase hex digits
};
absl::StatusOr<FileDigest> DigestFile(const std::string& path);

// True when `s` is a digest as FinishHex writes it: 64 lowercase hex digits.
bool IsSha256Hex(absl::string_view s);

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_SHA256_H_
