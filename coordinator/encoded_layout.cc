#include "coordinator/encoded_layout.h"

#include "absl/status/status.h"
#include "shard/layout_fingerprint.h"

namespace pshard {
namespace coordinator {

EncodedLayout EncodedLayout::FromBuckets(const Buckets& buckets) {
  v1::ReportBucketsRequest only;
  *only.mutable_buckets() = buckets;
  return EncodedLayout(only.SerializeAsString());
}

absl::StatusOr<EncodedLayout::Buckets> EncodedLayout::Decode() const {
  v1::ReportBucketsRequest parsed;
  if (!parsed.ParseFromString(bytes_)) {
    return absl::InvalidArgumentError("bucket layout does not parse");
  }
  return std::move(*parsed.mutable_buckets());
}

std::string EncodedLayout::Fingerprint() const {
  return shard::LayoutFingerprint(bytes_);
}

}  // namespace coordinator
}  // namespace pshard
