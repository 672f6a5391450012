#include "bench/coordinator/bench_tools.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace pshard {
namespace bench {

ProcStats ReadProc(pid_t pid) {
  ProcStats s;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  // Fields after the ")" closing the command name; utime and stime are the
  // 14th and 15th fields overall.
  const size_t close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    int64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoll(field);
      if (i == 15) stime = std::stoll(field);
    }
    s.cpu_seconds = static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
  }
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  while (std::getline(status, line)) {
    long kb = 0;
    if (sscanf(line.c_str(), "VmRSS: %ld kB", &kb) == 1) s.rss_mb = kb / 1024.0;
    if (sscanf(line.c_str(), "VmHWM: %ld kB", &kb) == 1) s.hwm_mb = kb / 1024.0;
  }
  return s;
}

bool ScanHeartbeatResponse(const std::string& bytes,
                           std::vector<DirectiveHead>* out) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  in.SetTotalBytesLimit(INT32_MAX);
  while (uint32_t tag = in.ReadTag()) {
    if (tag != ((1 << 3) | 2)) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      continue;
    }
    uint32_t len;
    if (!in.ReadVarint32(&len)) return false;
    auto directive_limit = in.PushLimit(len);
    while (uint32_t t = in.ReadTag()) {
      const int field = t >> 3;
      if ((field == 1 || field == 2) && (t & 7) == 2) {
        DirectiveHead head;
        head.run_job = field == 1;
        uint32_t inner;
        if (!in.ReadVarint32(&inner)) return false;
        auto limit = in.PushLimit(inner);
        while (uint32_t f = in.ReadTag()) {
          if (f == ((1 << 3) | 2)) {
            if (!WireFormatLite::ReadString(&in, &head.job_id)) return false;
          } else if (f == (2 << 3)) {
            uint64_t v;
            if (!in.ReadVarint64(&v)) return false;
            head.epoch = static_cast<int64_t>(v);
          } else if (f == (3 << 3) && head.run_job) {
            uint32_t v;
            if (!in.ReadVarint32(&v)) return false;
            head.rank = static_cast<int>(v);
          } else if (!WireFormatLite::SkipField(&in, f)) {
            return false;
          }
        }
        in.PopLimit(limit);
        out->push_back(std::move(head));
      } else if (!WireFormatLite::SkipField(&in, t)) {
        return false;
      }
    }
    in.PopLimit(directive_limit);
  }
  return true;
}

void Denials::Note(const std::string& method, const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::PERMISSION_DENIED &&
      s.error_code() != grpc::StatusCode::UNAUTHENTICATED) {
    return;
  }
  absl::MutexLock lock(&mu_);
  if (count_++ == 0) first_ = absl::StrCat(method, ": ", s.error_message());
  ++by_method_[method];
}

int64_t Denials::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

std::string Denials::Summary() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat(absl::StrJoin(by_method_, ", ", absl::PairFormatter(" ")),
                      " (first: ", first_, ")");
}

std::string BufferToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

grpc::ByteBuffer ToBuffer(const google::protobuf::MessageLite& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace bench
}  // namespace pshard
