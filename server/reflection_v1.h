// grpc.reflection.v1.ServerReflection, next to gRPC's built-in v1alpha
// (gRPC 1.51 serves only v1alpha; current grpcurl asks v1 first). Answers
// from protobuf's generated pool, so every message, service and file linked
// into the binary — pshard's API and grpc.health.v1 — resolves:
//
//   grpcurl -plaintext localhost:7070 list
//   grpcurl -plaintext localhost:7070 describe pshard.v1.JobService
//
// Both pshard servers (the coordinator's, the worker's status server)
// register one, naming the services they serve.
#ifndef PSHARD_SERVER_REFLECTION_V1_H_
#define PSHARD_SERVER_REFLECTION_V1_H_

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/sync_stream.h"

namespace pshard {
namespace server {

class ReflectionV1Service final
    : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the full names ListServices answers (this service's own and
  // v1alpha's are added).
  explicit ReflectionV1Service(std::vector<std::string> services);

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>*
          stream) override;

  // One request's response (what the stream sends for it).
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  std::vector<std::string> services_;
};

}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_REFLECTION_V1_H_
