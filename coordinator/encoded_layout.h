// A bucket layout in its encoded form, as a rank reported it: the entries of
// the `buckets` field of a ReportBucketsRequest, serialized. Every rank of a
// job reports the same layout, so after the first report of an epoch the
// coordinator compares encodings (operator==) and parses only a report that
// differs (Decode, with the generated parser).
//
// Made by FromBuckets (serializing typed buckets) or, in the server, by the
// wire codec (server/wire_codec.h), which copies the field's bytes out of
// the request as received, without parsing them. Either way the encoding is
// the generated serializer's format; the coordinator never frames bytes
// itself.
#ifndef PSHARD_COORDINATOR_ENCODED_LAYOUT_H_
#define PSHARD_COORDINATOR_ENCODED_LAYOUT_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace coordinator {

class EncodedLayout {
 public:
  using Buckets = google::protobuf::RepeatedPtrField<v1::BucketLayout>;

  // No layout (a fingerprint-only report).
  EncodedLayout() = default;
  static EncodedLayout FromBuckets(const Buckets& buckets);
  // `bytes`: zero or more `buckets` fields (field 5 of ReportBucketsRequest,
  // tag included) exactly as a client serialized them.
  static EncodedLayout FromEncoded(std::string bytes) {
    return EncodedLayout(std::move(bytes));
  }

  bool empty() const { return bytes_.empty(); }
  // Equal encodings hold equal layouts; unequal ones may still (a client
  // may serialize differently), which Decode and a field comparison settle.
  bool operator==(const EncodedLayout& other) const {
    return bytes_ == other.bytes_;
  }
  bool operator!=(const EncodedLayout& other) const { return !(*this == other); }

  // InvalidArgument: the bytes do not parse.
  absl::StatusOr<Buckets> Decode() const;
  // shard::LayoutFingerprint of the layout (as a worker computes it).
  std::string Fingerprint() const;

 private:
  explicit EncodedLayout(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_ENCODED_LAYOUT_H_
