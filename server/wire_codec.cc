#include "server/wire_codec.h"

#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace pshard {
namespace server {
namespace wire {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr uint32_t Tag(int field, WireFormatLite::WireType type) {
  return (static_cast<uint32_t>(field) << 3) | type;
}
constexpr uint32_t LengthDelimited(int field) {
  return Tag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
}
constexpr uint32_t Varint(int field) {
  return Tag(field, WireFormatLite::WIRETYPE_VARINT);
}

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Field `field` (length-delimited) holding `bytes`.
void AppendLengthDelimited(int field, absl::string_view bytes,
                           std::string* out) {
  AppendVarint(LengthDelimited(field), out);
  AppendVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

}  // namespace

std::string EncodeRunJobSpecTail(const v1::JobSpec& spec) {
  std::string out;
  AppendLengthDelimited(kRunJobDirectiveSpec, spec.SerializeAsString(), &out);
  return out;
}

std::vector<std::optional<std::string>> EncodeHeartbeatResponse(
    const v1::HeartbeatResponse& response, std::optional<size_t> tail_size) {
  std::vector<std::optional<std::string>> pieces;
  for (const v1::Directive& d : response.directives()) {
    if (!d.has_run_job() || !tail_size.has_value()) {
      std::string bytes;
      AppendLengthDelimited(kHeartbeatResponseDirectives, d.SerializeAsString(),
                            &bytes);
      pieces.emplace_back(std::move(bytes));
      continue;
    }
    //   directives { run_job { <RunJob head> <tail> } }
    const std::string head = d.run_job().SerializeAsString();
    const size_t run_len = head.size() + *tail_size;
    std::string directive_header;
    AppendVarint(LengthDelimited(kDirectiveRunJob), &directive_header);
    AppendVarint(run_len, &directive_header);
    std::string bytes;
    AppendVarint(LengthDelimited(kHeartbeatResponseDirectives), &bytes);
    AppendVarint(directive_header.size() + run_len, &bytes);
    bytes += directive_header;
    bytes += head;
    pieces.emplace_back(std::move(bytes));
    pieces.emplace_back(std::nullopt);
  }
  // Fields may come in any order on the wire. wire_codec_test fails when
  // HeartbeatResponse gains a field this does not write.
  if (response.job_checkpoint_step() != 0) {
    std::string bytes;
    AppendVarint(Varint(kHeartbeatResponseJobCheckpointStep), &bytes);
    AppendVarint(static_cast<uint64_t>(response.job_checkpoint_step()), &bytes);
    pieces.emplace_back(std::move(bytes));
  }
  return pieces;
}

absl::StatusOr<ReportBucketsFrame> DecodeReportBucketsRequest(
    absl::string_view bytes) {
  // Read the scalar fields; copy every `buckets` entry verbatim.
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(bytes.data()),
      static_cast<int>(bytes.size()));
  ReportBucketsFrame frame;
  coordinator::Coordinator::LayoutReport& r = frame.report;
  std::string buckets;
  int64_t rank = 0;
  bool ok = true;
  while (ok) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    switch (tag) {
      case LengthDelimited(kReportBucketsJobId):
        ok = WireFormatLite::ReadString(&in, &r.job_id);
        break;
      case Varint(kReportBucketsEpoch): {
        uint64_t v = 0;
        ok = in.ReadVarint64(&v);
        r.epoch = static_cast<int64_t>(v);
        break;
      }
      case Varint(kReportBucketsRank): {
        uint64_t v = 0;
        ok = in.ReadVarint64(&v);
        rank = static_cast<int64_t>(v);
        break;
      }
      case LengthDelimited(kReportBucketsWorkerId):
        ok = WireFormatLite::ReadString(&in, &r.worker_id);
        break;
      case LengthDelimited(kReportBucketsLayoutFingerprint):
        ok = WireFormatLite::ReadBytes(&in, &r.fingerprint);
        break;
      case LengthDelimited(kReportBucketsTimeout): {
        std::string timeout;
        ok = WireFormatLite::ReadBytes(&in, &timeout) &&
             frame.timeout.ParseFromString(timeout);
        break;
      }
      case LengthDelimited(kReportBucketsBuckets): {
        uint32_t len = 0;
        const void* data = nullptr;
        int size = 0;
        ok = in.ReadVarint32(&len) && in.GetDirectBufferPointer(&data, &size) &&
             static_cast<uint32_t>(size) >= len;
        if (ok) {
          AppendVarint(tag, &buckets);
          AppendVarint(len, &buckets);
          buckets.append(static_cast<const char*>(data), len);
          ok = in.Skip(static_cast<int>(len));
        }
        break;
      }
      default:
        ok = WireFormatLite::SkipField(&in, tag);
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError("ReportBucketsRequest does not parse");
  }
  r.rank = rank < 0 || rank > std::numeric_limits<int32_t>::max()
               ? -1
               : static_cast<int>(rank);
  r.layout = coordinator::EncodedLayout::FromEncoded(std::move(buckets));
  return frame;
}

}  // namespace wire
}  // namespace server
}  // namespace pshard
