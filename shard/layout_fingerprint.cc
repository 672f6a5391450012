#include "shard/layout_fingerprint.h"

#include <openssl/sha.h>

namespace pshard {
namespace shard {

std::string LayoutFingerprint(absl::string_view buckets_wire) {
  static_assert(SHA256_DIGEST_LENGTH == kLayoutFingerprintBytes);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(buckets_wire.data()),
         buckets_wire.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

std::string LayoutFingerprint(
    const google::protobuf::RepeatedPtrField<v1::BucketLayout>& buckets) {
  v1::ReportBucketsRequest only;
  *only.mutable_buckets() = buckets;
  return LayoutFingerprint(only.SerializeAsString());
}

}  // namespace shard
}  // namespace pshard
