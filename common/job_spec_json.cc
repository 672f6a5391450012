#include "common/job_spec_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pshard {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::ListValue;
using google::protobuf::OneofDescriptor;
using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status PathError(absl::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(
      path.empty() ? std::string(problem) : absl::StrCat(path, ": ", problem));
}

std::string Child(absl::string_view path, absl::string_view name) {
  return path.empty() ? std::string(name) : absl::StrCat(path, ".", name);
}

// Levenshtein distance, for suggesting the field a typo meant.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

const FieldDescriptor* FindField(const Descriptor& type, absl::string_view key) {
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor* field = type.field(i);
    if (field->name() == key || field->json_name() == key) return field;
  }
  return nullptr;
}

absl::Status UnknownField(const Descriptor& type, absl::string_view path,
                          absl::string_view key) {
  const std::string lower = absl::AsciiStrToLower(key);
  const FieldDescriptor* nearest = nullptr;
  size_t best = std::numeric_limits<size_t>::max();
  std::vector<std::string> names;
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor* field = type.field(i);
    names.push_back(field->name());
    for (const std::string& name : {field->name(), field->json_name()}) {
      const size_t distance = EditDistance(lower, absl::AsciiStrToLower(name));
      if (distance < best) {
        best = distance;
        nearest = field;
      }
    }
  }
  const std::string field_path = Child(path, absl::CHexEscape(key));
  // Close enough to be a typo of it: a third of the name, at least 2 edits.
  if (nearest != nullptr && best <= std::max<size_t>(2, key.size() / 3) &&
      best < key.size()) {
    return PathError(field_path, absl::StrCat("unknown field; did you mean ",
                                              nearest->name(), "?"));
  }
  return PathError(field_path,
                   absl::StrCat("unknown field (",
                                path.empty() ? "fields" : "its fields", ": ",
                                absl::StrJoin(names, ", "), ")"));
}

// How a JSON value reads in an error: `"two"`, 1.5, true, null, a list.
std::string Describe(const Value& value) {
  switch (value.kind_case()) {
    case Value::kNullValue:
      return "null";
    case Value::kNumberValue: {
      // Whole numbers as written (99999999999, not 1e+11).
      const double number = value.number_value();
      if (std::trunc(number) == number && std::abs(number) < 1e18) {
        return absl::StrCat(static_cast<int64_t>(number));
      }
      return absl::StrCat(number);
    }
    case Value::kStringValue: {
      const std::string& s = value.string_value();
      return absl::StrCat(
          "\"", absl::CHexEscape(s.size() > 40 ? s.substr(0, 40) + "..." : s),
          "\"");
    }
    case Value::kBoolValue:
      return value.bool_value() ? "true" : "false";
    case Value::kStructValue:
      return "an object";
    case Value::kListValue:
      return "a list";
    case Value::KIND_NOT_SET:
      break;
  }
  return "nothing";
}

absl::Status Expected(absl::string_view path, absl::string_view what,
                      const Value& value) {
  return PathError(path, absl::StrCat("must be ", what, ", got ",
                                      Describe(value)));
}

absl::Status CheckInteger(const FieldDescriptor& field, absl::string_view path,
                          const Value& value) {
  const bool is_unsigned = field.cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
                           field.cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
  const bool is_32 = field.cpp_type() == FieldDescriptor::CPPTYPE_INT32 ||
                     field.cpp_type() == FieldDescriptor::CPPTYPE_UINT32;
  double lo = is_unsigned ? 0
              : is_32     ? std::numeric_limits<int32_t>::min()
                          : static_cast<double>(std::numeric_limits<int64_t>::min());
  double hi = is_unsigned ? (is_32 ? std::numeric_limits<uint32_t>::max()
                                   : static_cast<double>(
                                         std::numeric_limits<uint64_t>::max()))
              : is_32     ? std::numeric_limits<int32_t>::max()
                          : static_cast<double>(std::numeric_limits<int64_t>::max());
  const std::string range = absl::StrCat(
      "an integer in [", is_32 || is_unsigned ? absl::StrCat(int64_t(lo)) : "-2^63",
      ", ", is_32 ? absl::StrCat(uint64_t(hi)) : is_unsigned ? "2^64-1" : "2^63-1",
      "]");
  double number = 0;
  if (value.kind_case() == Value::kNumberValue) {
    number = value.number_value();
  } else if (value.kind_case() == Value::kStringValue) {
    // Protobuf's mapping also takes an integer in quotes ("7").
    int64_t as_int = 0;
    uint64_t as_uint = 0;
    if (absl::SimpleAtoi(value.string_value(), &as_int)) {
      number = static_cast<double>(as_int);
    } else if (absl::SimpleAtoi(value.string_value(), &as_uint)) {
      number = static_cast<double>(as_uint);
    } else {
      return Expected(path, "an integer", value);
    }
  } else {
    return Expected(path, "an integer", value);
  }
  if (!std::isfinite(number) || std::trunc(number) != number) {
    return Expected(path, "an integer", value);
  }
  if (number < lo || number > hi) return Expected(path, range, value);
  return absl::OkStatus();
}

absl::Status CheckObject(const Descriptor& type, const Struct& object,
                         absl::string_view path);

// One value of `field`: the field itself, or one element of a list, or one
// value of a map.
absl::Status CheckSingle(const FieldDescriptor& field, absl::string_view path,
                         const Value& value) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (value.kind_case() != Value::kStructValue) {
        return Expected(path, "an object", value);
      }
      return CheckObject(*field.message_type(), value.struct_value(), path);
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return CheckInteger(field, path, value);
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      if (value.kind_case() == Value::kNumberValue) return absl::OkStatus();
      double parsed = 0;
      if (value.kind_case() == Value::kStringValue &&
          (value.string_value() == "NaN" || value.string_value() == "Infinity" ||
           value.string_value() == "-Infinity" ||
           absl::SimpleAtod(value.string_value(), &parsed))) {
        return absl::OkStatus();
      }
      return Expected(path, "a number", value);
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      if (value.kind_case() == Value::kBoolValue) return absl::OkStatus();
      return Expected(path, "true or false", value);
    case FieldDescriptor::CPPTYPE_STRING:
      if (value.kind_case() == Value::kStringValue) return absl::OkStatus();
      return Expected(path, "a string", value);
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumDescriptor& type = *field.enum_type();
      if (value.kind_case() == Value::kStringValue) {
        const std::string upper = absl::AsciiStrToUpper(value.string_value());
        if (type.FindValueByName(upper) != nullptr) return absl::OkStatus();
        return PathError(path,
                         UnknownEnumValueMessage(type, Describe(value)));
      }
      if (value.kind_case() == Value::kNumberValue) {
        const double number = value.number_value();
        if (std::trunc(number) == number && std::abs(number) < 1e9 &&
            type.FindValueByNumber(static_cast<int>(number)) != nullptr) {
          return absl::OkStatus();
        }
        return PathError(path,
                         UnknownEnumValueMessage(type, Describe(value)));
      }
      return PathError(path, UnknownEnumValueMessage(type, Describe(value)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckField(const FieldDescriptor& field, absl::string_view path,
                        const Value& value) {
  if (field.is_map()) {
    if (value.kind_case() != Value::kStructValue) {
      return Expected(path, "an object", value);
    }
    const FieldDescriptor& key_field = *field.message_type()->map_key();
    const FieldDescriptor& value_field = *field.message_type()->map_value();
    std::vector<std::string> keys;
    for (const auto& [key, unused] : value.struct_value().fields()) {
      keys.push_back(key);
    }
    std::sort(keys.begin(), keys.end());
    for (const std::string& key : keys) {
      const std::string entry =
          absl::StrCat(path, "[\"", absl::CHexEscape(key), "\"]");
      if (key_field.cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
        Value key_value;
        key_value.set_string_value(key);
        RETURN_IF_ERROR(CheckInteger(key_field, entry, key_value));
      }
      RETURN_IF_ERROR(
          CheckSingle(value_field, entry, value.struct_value().fields().at(key)));
    }
    return absl::OkStatus();
  }
  if (field.is_repeated()) {
    if (value.kind_case() != Value::kListValue) {
      return Expected(path, "a list", value);
    }
    const ListValue& list = value.list_value();
    for (int i = 0; i < list.values_size(); ++i) {
      const std::string element = absl::StrCat(path, "[", i, "]");
      if (list.values(i).kind_case() == Value::kNullValue) {
        return PathError(element, "null is not allowed in a list");
      }
      RETURN_IF_ERROR(CheckSingle(field, element, list.values(i)));
    }
    return absl::OkStatus();
  }
  return CheckSingle(field, path, value);
}

absl::Status CheckObject(const Descriptor& type, const Struct& object,
                         absl::string_view path) {
  // In name order, so that of several errors the same one is named each time.
  std::vector<std::string> keys;
  for (const auto& [key, unused] : object.fields()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  std::vector<std::pair<const OneofDescriptor*, const FieldDescriptor*>> set_oneofs;
  for (const std::string& key : keys) {
    const FieldDescriptor* field = FindField(type, key);
    if (field == nullptr) return UnknownField(type, path, key);
    const Value& value = object.fields().at(key);
    // null leaves a field unset, as protobuf's mapping says.
    if (value.kind_case() == Value::kNullValue) continue;
    if (const OneofDescriptor* oneof = field->real_containing_oneof()) {
      for (const auto& [other_oneof, other] : set_oneofs) {
        if (other_oneof != oneof) continue;
        std::vector<std::string> members;
        for (int i = 0; i < oneof->field_count(); ++i) {
          members.push_back(oneof->field(i)->name());
        }
        const bool other_first = other->name() < field->name();
        return PathError(
            Child(path, oneof->name()),
            absl::StrCat("only one of ", absl::StrJoin(members, ", "),
                         ", got ", other_first ? other->name() : field->name(),
                         " and ", other_first ? field->name() : other->name()));
      }
      set_oneofs.emplace_back(oneof, field);
    }
    RETURN_IF_ERROR(CheckField(*field, Child(path, field->name()), value));
  }
  return absl::OkStatus();
}

// Protobuf's parser reports a syntax error as "<message>\n<up to 20
// characters either side>\n<spaces>^" and no offset. Returns the message and
// the error's offset in `json`, found by placing that excerpt in it; nullopt
// when it cannot be placed in one place.
std::pair<std::string, std::optional<size_t>> LocateSyntaxError(
    absl::string_view json, absl::string_view error) {
  constexpr size_t kContext = 20;  // Protobuf's json_stream_parser.cc.
  const size_t first_newline = error.find('\n');
  const size_t last_newline = error.rfind('\n');
  if (first_newline == absl::string_view::npos || first_newline == last_newline) {
    return {std::string(error), std::nullopt};
  }
  const std::string message(error.substr(0, first_newline));
  const absl::string_view excerpt =
      error.substr(first_newline + 1, last_newline - first_newline - 1);
  const absl::string_view caret = error.substr(last_newline + 1);
  const size_t column = caret.find('^');
  if (column == absl::string_view::npos) return {message, std::nullopt};
  // At the end of the text the parser keeps only the unfinished tail.
  if (absl::StartsWith(message, "Unexpected end of string")) {
    return {message, json.size()};
  }
  // Fewer than kContext characters before the error: the excerpt starts at
  // the beginning of the text the parser held, which is the whole text or
  // (for a text parsed in parts) the unparsed end of it.
  if (column < kContext && absl::StartsWith(json, excerpt)) {
    return {message, column};
  }
  if (absl::EndsWith(json, excerpt)) {
    return {message, json.size() - excerpt.size() + column};
  }
  const size_t start = json.find(excerpt);
  if (start == absl::string_view::npos || json.rfind(excerpt) != start) {
    return {message, std::nullopt};  // Not found, or not in one place.
  }
  return {message, start + column};
}

absl::Status SyntaxError(absl::string_view json, absl::string_view error) {
  auto [message, offset] = LocateSyntaxError(json, error);
  absl::StripTrailingAsciiWhitespace(&message);
  if (!offset.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON syntax error: ", message));
  }
  const absl::string_view before = json.substr(0, *offset);
  const size_t line = 1 + std::count(before.begin(), before.end(), '\n');
  const size_t line_start = before.rfind('\n');
  const size_t column =
      *offset - (line_start == absl::string_view::npos ? 0 : line_start + 1) + 1;
  return absl::InvalidArgumentError(absl::StrCat(
      "JSON syntax error at line ", line, ", column ", column, ": ", message));
}

// A failure of protobuf's parser that the checks above did not foresee,
// without its type names: "(mlp.input_dim): invalid value 1e99 for type
// TYPE_INT32" -> "mlp.input_dim: invalid value 1e99".
absl::Status FromProtobufError(absl::string_view path, absl::string_view error) {
  absl::string_view text = error;
  if (absl::ConsumePrefix(&text, "(")) {
    const size_t close = text.find("): ");
    const size_t type = text.rfind(" for type ");
    if (close != absl::string_view::npos && type != absl::string_view::npos &&
        type > close) {
      return PathError(Child(path, text.substr(0, close)),
                       text.substr(close + 3, type - (close + 3)));
    }
  }
  return PathError(path, error);
}

}  // namespace

std::string UnknownEnumValueMessage(const EnumDescriptor& type,
                                    absl::string_view value) {
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    const std::string& name = type.value(i)->name();
    if (!absl::EndsWith(name, "_UNSPECIFIED")) names.push_back(name);
  }
  return absl::StrCat("unknown value ", value, "; valid values: ",
                      absl::StrJoin(names, ", "));
}

absl::Status ParseStrictJson(absl::string_view json, absl::string_view path,
                             google::protobuf::Message* message) {
  if (absl::StripAsciiWhitespace(json).empty()) {
    return PathError(path, "empty: expected a JSON object");
  }
  const google::protobuf::StringPiece text(json.data(), json.size());
  Value tree;
  if (const auto parsed = google::protobuf::util::JsonStringToMessage(text, &tree);
      !parsed.ok()) {
    const std::string error = parsed.message().ToString();
    // The Value parse refuses a key given twice (protobuf's own parse of a
    // message would keep the last silently).
    constexpr char kRepeatedKey[] = "Repeated map key: '";
    if (const size_t at = error.find(kRepeatedKey); at != std::string::npos) {
      absl::string_view key = absl::string_view(error).substr(at + sizeof(kRepeatedKey) - 1);
      key = key.substr(0, key.find("' is already set"));
      return PathError(path, absl::StrCat("duplicate key \"",
                                          absl::CHexEscape(key), "\""));
    }
    const absl::Status syntax = SyntaxError(json, error);
    return path.empty() ? syntax
                        : PathError(path, syntax.message());
  }
  if (tree.kind_case() != Value::kStructValue) {
    return Expected(path, "a JSON object", tree);
  }
  RETURN_IF_ERROR(
      CheckObject(*message->GetDescriptor(), tree.struct_value(), path));
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  options.case_insensitive_enum_parsing = true;
  if (const auto parsed =
          google::protobuf::util::JsonStringToMessage(text, message, options);
      !parsed.ok()) {
    return FromProtobufError(path, parsed.message().ToString());
  }
  return absl::OkStatus();
}

}  // namespace pshard
