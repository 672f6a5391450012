#include "checkpoint/spec_fingerprint.h"

#include <string>

#include "checkpoint/sha256.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace pshard::checkpoint {

absl::StatusOr<std::string> SpecFingerprint(const v1::JobSpec& spec) {
  const v1::JobSpec defaulted = ApplyJobSpecDefaults(spec);
  v1::JobSpec kept;
  switch (defaulted.workload_case()) {
    case v1::JobSpec::kMlp:
      *kept.mutable_mlp() = defaulted.mlp();
      break;
    case v1::JobSpec::kSynthetic:
      *kept.mutable_synthetic() = defaulted.synthetic();
      break;
    case v1::JobSpec::kReplay:
      *kept.mutable_replay() = defaulted.replay();
      break;
    case v1::JobSpec::kProgram:
      // A program's argv and env may change between runs (paths, flags);
      // its parameters are named by the program itself.
      kept.mutable_program();
      break;
    case v1::JobSpec::WORKLOAD_NOT_SET:
      break;
  }
  if (defaulted.has_optimizer()) *kept.mutable_optimizer() = defaulted.optimizer();
  kept.set_seed(defaulted.seed());
  // Deterministic serialization: the same message, the same bytes (map
  // entries sorted), in this build.
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    kept.SerializeToCodedStream(&coded);
  }
  ASSIGN_OR_RETURN(Sha256 sha, Sha256::Create());
  sha.Update(bytes);
  return sha.FinishHex();
}

}  // namespace pshard::checkpoint
