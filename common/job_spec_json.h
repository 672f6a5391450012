// Reading a job spec (or a part of one, such as an OptimizerSpec) from JSON,
// with errors written for the person who wrote the file. Protobuf's JSON
// parser does the conversion; a check of the same text, parsed first into a
// google.protobuf.Value tree, against the message's descriptor finds what
// protobuf would accept silently (`null` inside a list is dropped, a number
// where a list is expected becomes a one-element list, an enum number with
// no name is kept) or report in its own terms (type names such as
// TYPE_INT32, "Cannot find field").
#ifndef PSHARD_COMMON_JOB_SPEC_JSON_H_
#define PSHARD_COMMON_JOB_SPEC_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace pshard {

// Parses `json` into `message` under protobuf's JSON mapping (field names as
// in the .proto or in lowerCamelCase, enum names in any case, integers also
// as strings). Fields are named by their path from the message, prefixed
// with `path` when it is not empty ("optimizer" -> "optimizer.kind").
// InvalidArgument, one line each:
//   "JSON syntax error at line 3, column 18: Expected : between key:value pair."
//   "empty: expected a JSON object"
//   "duplicate key \"name\""
//   "mlp.input_dims: unknown field; did you mean input_dim?"
//   "world_size: must be an integer, got \"two\""
//   "backend: unknown value \"mpi\"; valid values: AUTO, NCCL, GLOO"
//   "mlp.hidden_dims[0]: null is not allowed in a list"
//   "workload: only one of mlp, synthetic, replay, program, got mlp and replay"
// Checks only the JSON's shape and types; the rules of a valid job spec are
// ValidateJobSpec's.
absl::Status ParseStrictJson(absl::string_view json, absl::string_view path,
                             google::protobuf::Message* message);

// "unknown value 7; valid values: AUTO, NCCL, GLOO" for `value` (a JSON
// string or number as the user wrote it) of `type`; the *_UNSPECIFIED value
// (the default, which means "not set") is not listed.
std::string UnknownEnumValueMessage(const google::protobuf::EnumDescriptor& type,
                                    absl::string_view value);

}  // namespace pshard

#endif  // PSHARD_COMMON_JOB_SPEC_JSON_H_
