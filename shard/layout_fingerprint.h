// The fingerprint of a bucket layout report: what a rank sends instead of its
// layout when every rank of a job has the same one (ReportBucketsRequest.
// layout_fingerprint). The coordinator computes it over the first full report
// and accepts later fingerprint-only reports that match it, so a 4096-rank
// job's layout crosses the network once instead of 4096 times.
//
// SHA-256, because an accidental collision would let two ranks train with
// different layouts unnoticed; computed over protobuf's serialization of a
// ReportBucketsRequest that holds only `buckets` (the bytes the coordinator
// compares). A sender whose serializer orders bytes differently only loses
// the shortcut: its fingerprint is unknown, and it is asked for the layout.
#ifndef PSHARD_SHARD_LAYOUT_FINGERPRINT_H_
#define PSHARD_SHARD_LAYOUT_FINGERPRINT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace shard {

// Bytes in a fingerprint.
inline constexpr size_t kLayoutFingerprintBytes = 32;

// The fingerprint of `buckets_wire`, the serialized form of a
// ReportBucketsRequest holding only its `buckets` field.
std::string LayoutFingerprint(absl::string_view buckets_wire);

// The fingerprint of `buckets`, as a rank computes it before reporting.
std::string LayoutFingerprint(
    const google::protobuf::RepeatedPtrField<v1::BucketLayout>& buckets);

}  // namespace shard
}  // namespace pshard

#endif  // PSHARD_SHARD_LAYOUT_FINGERPRINT_H_
