#include "server/reflection_v1.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.pb.h"

namespace pshard {
namespace server {
namespace {

using grpc::reflection::v1::ServerReflectionRequest;
using grpc::reflection::v1::ServerReflectionResponse;

// `file` and, depth first, every file it imports, each once.
void AddFileAndDependencies(const google::protobuf::FileDescriptor* file,
                            absl::flat_hash_set<std::string>& sent,
                            ServerReflectionResponse& response) {
  if (!sent.insert(file->name()).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(
      response.mutable_file_descriptor_response()->add_file_descriptor_proto());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileAndDependencies(file->dependency(i), sent, response);
  }
}

void SetError(grpc::StatusCode code, std::string message,
              ServerReflectionResponse& response) {
  response.mutable_error_response()->set_error_code(code);
  response.mutable_error_response()->set_error_message(std::move(message));
}

}  // namespace

ReflectionV1Service::ReflectionV1Service(std::vector<std::string> services)
    : services_(std::move(services)) {
  // gRPC's built-in health service has no descriptor of its own; this one
  // (linked by this reference) puts grpc.health.v1 in the generated pool.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  services_.push_back("grpc.health.v1.Health");
  services_.push_back("grpc.reflection.v1.ServerReflection");
  services_.push_back("grpc.reflection.v1alpha.ServerReflection");
}

ServerReflectionResponse ReflectionV1Service::Answer(
    const ServerReflectionRequest& request) const {
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  absl::flat_hash_set<std::string> sent;
  switch (request.message_request_case()) {
    case ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case ServerReflectionRequest::kFileByFilename:
      if (const auto* file = pool->FindFileByName(request.file_by_filename())) {
        AddFileAndDependencies(file, sent, response);
      } else {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no file ", request.file_by_filename()), response);
      }
      break;
    case ServerReflectionRequest::kFileContainingSymbol:
      if (const auto* file =
              pool->FindFileContainingSymbol(request.file_containing_symbol())) {
        AddFileAndDependencies(file, sent, response);
      } else {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no symbol ", request.file_containing_symbol()),
                 response);
      }
      break;
    case ServerReflectionRequest::kFileContainingExtension: {
      const auto& ask = request.file_containing_extension();
      const auto* type = pool->FindMessageTypeByName(ask.containing_type());
      const auto* extension =
          type == nullptr ? nullptr
                          : pool->FindExtensionByNumber(type, ask.extension_number());
      if (extension != nullptr) {
        AddFileAndDependencies(extension->file(), sent, response);
      } else {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no extension ", ask.extension_number(), " of ",
                              ask.containing_type()),
                 response);
      }
      break;
    }
    case ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const auto* type =
          pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no type ", request.all_extension_numbers_of_type()),
                 response);
        break;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      auto* numbers = response.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* e : extensions) numbers->add_extension_number(e->number());
      break;
    }
    case ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::INVALID_ARGUMENT,
               "the request names no message_request", response);
      break;
  }
  return response;
}

grpc::Status ReflectionV1Service::ServerReflectionInfo(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<ServerReflectionResponse, ServerReflectionRequest>*
        stream) {
  ServerReflectionRequest request;
  while (!context->IsCancelled() && stream->Read(&request)) {
    if (!stream->Write(Answer(request))) break;
  }
  return grpc::Status::OK;
}

}  // namespace server
}  // namespace pshard
