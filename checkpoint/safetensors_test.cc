#include "checkpoint/safetensors.h"

#include <sys/wait.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::checkpoint {
namespace {

using ::pshard::testing::ListDirectory;
using ::pshard::testing::MakeTempDir;
using ::pshard::testing::ReadFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// A file image: length prefix, `header` verbatim, then `data`.
std::string Image(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  return out + header + data;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(T));
}

struct Tensor {
  TensorSpec spec;
  std::string bytes;
};

absl::StatusOr<FileDigest> WriteTensors(
    const std::string& path, const std::vector<Tensor>& tensors,
    const std::map<std::string, std::string>& metadata, size_t piece = 0) {
  std::vector<TensorSpec> specs;
  for (const Tensor& t : tensors) specs.push_back(t.spec);
  ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, specs, metadata));
  for (const Tensor& t : tensors) {
    // In pieces, to check that appends need not align with tensors.
    const size_t step = piece == 0 ? std::max<size_t>(t.bytes.size(), 1) : piece;
    for (size_t at = 0; at < t.bytes.size(); at += step) {
      RETURN_IF_ERROR(writer->Append(absl::string_view(t.bytes).substr(at, step)));
    }
  }
  return writer->Finish();
}

std::vector<Tensor> MixedTensors() {
  return {
      {{"layer.weight", DType::kF32, {2, 3}}, Bytes<float>({0, 1, 2, 3, 4, 5})},
      {{"half", DType::kBF16, {2}}, Bytes<uint16_t>({0x3fc0, 0xc000})},  // 1.5, -2
      {{"double", DType::kF64, {1}}, Bytes<double>({-0.125})},
      {{"count", DType::kI64, {}}, Bytes<int64_t>({int64_t{1} << 40})},
      {{"empty", DType::kF16, {0, 4}}, ""},
      {{"name \"q\" \\ \xc3\xa9", DType::kU8, {3}}, "abc"},
  };
}

TEST(SafetensorsTest, RoundTripOfEveryKindOfTensorWithMetadata) {
  const std::string path = MakeTempDir("st") + "/mixed.safetensors";
  const std::vector<Tensor> tensors = MixedTensors();
  ASSERT_OK_AND_ASSIGN(FileDigest digest,
                       WriteTensors(path, tensors, {{"format", "pt"}, {"k", "v \"q\""}}, 3));
  ASSERT_OK_AND_ASSIGN(FileDigest on_disk, DigestFile(path));
  EXPECT_EQ(digest.size_bytes, on_disk.size_bytes);
  EXPECT_EQ(digest.sha256, on_disk.sha256);

  ASSERT_OK_AND_ASSIGN(auto reader, SafetensorsReader::Open(path));
  EXPECT_EQ(reader->file_size(), digest.size_bytes);
  EXPECT_EQ(reader->metadata().at("k"), "v \"q\"");
  ASSERT_EQ(reader->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].spec.name);
    const TensorInfo& info = reader->tensors()[i];  // offset order = write order
    EXPECT_EQ(info.name, tensors[i].spec.name);
    EXPECT_EQ(info.dtype, tensors[i].spec.dtype);
    EXPECT_EQ(info.shape, tensors[i].spec.shape);
    ASSERT_OK_AND_ASSIGN(std::string bytes, reader->ReadBytes(info.name));
    EXPECT_EQ(bytes, tensors[i].bytes);
  }
  EXPECT_EQ(reader->Find("nope"), nullptr);
  EXPECT_THAT(reader->ReadBytes("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nope'")));
  std::string small(3, '\0');
  EXPECT_THAT(reader->ReadInto(*reader->Find("double"), absl::MakeSpan(small)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("8 bytes")));
  // The data section starts 8-byte aligned.
  ASSERT_OK_AND_ASSIGN(std::string header, SerializeSafetensorsHeader({}, {}));
  EXPECT_EQ(header.size() % 8, 0u);
}

TEST(SafetensorsTest, DTypeNamesAndSizes) {
  for (const char* name : {"F32", "BF16", "F16", "F64", "I64", "I32", "U8",
                           "BOOL", "F8_E4M3"}) {
    ASSERT_OK_AND_ASSIGN(DType dtype, ParseDType(name));
    EXPECT_EQ(DTypeName(dtype), name);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kF64), 8);
  EXPECT_THAT(ParseDType("F128"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("unknown dtype 'F128'")));
}

struct BadCase {
  const char* what;
  std::string bytes;
  const char* message;
};

TEST(SafetensorsTest, RejectsMalformedFilesNamingTheFileAndTheProblem) {
  const std::string data8 = Bytes<float>({1, 2});
  const std::string huge_len(8, '\xff');
  const std::vector<BadCase> cases = {
      {"empty", "", "truncated"},
      {"short prefix", "abc", "truncated"},
      {"huge header length", huge_len + "{}", "exceeds the limit"},
      {"header past the end", Image("{}", "").substr(0, 9), "truncated"},
      {"not json", Image("{nope", ""), "not a JSON object"},
      {"json array", Image("[1,2]", ""), "not a JSON object"},
      {"entry not object", Image(R"({"a":3})", ""), "'a': header entry is not an object"},
      {"missing field", Image(R"({"a":{"dtype":"F32","shape":[1]}})", ""),
       "needs dtype, shape and data_offsets"},
      {"unknown field",
       Image(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}})", Bytes<float>({1})),
       "unknown header field 'x'"},
      {"unknown dtype", Image(R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", Bytes<float>({1})),
       "tensor 'w': unknown dtype 'F12'"},
      {"dtype not string", Image(R"({"w":{"dtype":1,"shape":[2],"data_offsets":[0,8]}})", data8),
       "dtype is not a string"},
      {"truncated data", Image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8),
       "larger than the file's data section of 8 bytes (a truncated file?)"},
      {"offsets past the end", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data8),
       "outside the data section of 8 bytes (a truncated file?)"},
      {"begin after end", Image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data8),
       "outside the data section"},
      {"negative offset", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data8),
       "non-negative integer"},
      {"fractional offset", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}})", data8),
       "non-negative integer"},
      {"one offset", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8),
       "[begin, end]"},
      {"size mismatch", Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", data8),
       "shape [1] of F32 needs 4"},
      {"bf16 size mismatch", Image(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", data8),
       "of BF16 needs 4"},
      {"huge shape", Image(R"({"w":{"dtype":"F32","shape":[9007199254740992,9007199254740992],"data_offsets":[0,8]}})", data8),
       "larger than the file's data section"},
      {"shape not list", Image(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", data8),
       "shape must be a list"},
      {"overlap",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8),
       "overlap"},
      {"gap", Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8),
       "data must be contiguous"},
      {"trailing bytes", Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data8),
       "trailing bytes"},
      {"bad metadata", Image(R"({"__metadata__":{"k":1}})", ""), "__metadata__ value 'k'"},
      {"metadata not object", Image(R"({"__metadata__":[]})", ""), "__metadata__ is not an object"},
      {"empty name", Image(R"({"":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", Bytes<float>({1})),
       "empty name"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_THAT(ParseSafetensorsImage(c.bytes, "mem.safetensors"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(c.message)));
    const std::string path = pshard::testing::WriteTempFile("bad.safetensors", c.bytes);
    EXPECT_THAT(SafetensorsReader::Open(path),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr(path), HasSubstr(c.message))));
  }
  EXPECT_THAT(SafetensorsReader::Open(MakeTempDir("st") + "/missing.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.safetensors")));
}

TEST(SafetensorsTest, EveryTruncationOfAValidFileIsRefused) {
  const std::string path = MakeTempDir("st") + "/whole.safetensors";
  ASSERT_OK(WriteTensors(path, MixedTensors(), {{"format", "pt"}}).status());
  const std::string whole = ReadFile(path);
  for (size_t size = 0; size < whole.size(); ++size) {
    SCOPED_TRACE(size);
    EXPECT_THAT(ParseSafetensorsImage(whole.substr(0, size), "cut"),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cut")));
  }
}

TEST(SafetensorsTest, CorruptedFilesNeverCrash) {
  const std::string path = MakeTempDir("st") + "/good.safetensors";
  ASSERT_OK(WriteTensors(path, MixedTensors(), {}).status());
  const std::string good = ReadFile(path);
  std::mt19937 rng(7);
  int ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    auto header = ParseSafetensorsImage(bytes, "fuzz");
    if (header.ok()) {
      ++ok;
      int64_t covered = 0;
      for (const TensorInfo& t : header->tensors) {
        EXPECT_EQ(t.begin, covered);
        EXPECT_EQ(t.byte_size(), t.numel * DTypeSize(t.dtype));
        covered = t.end;
      }
      EXPECT_EQ(header->data_start + covered, static_cast<int64_t>(bytes.size()));
    } else {
      EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_GT(ok, 0);  // flips inside the data are still valid files
}

TEST(SafetensorsTest, WriterRefusesBadInputAndLeavesNoFile) {
  const std::string dir = MakeTempDir("stw");
  const std::string path = dir + "/out.safetensors";
  EXPECT_THAT(SafetensorsWriter::Create(path, {{"x", DType::kF32, {2}}, {"x", DType::kF32, {2}}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'x' appears twice")));
  EXPECT_THAT(SafetensorsWriter::Create(path, {{"", DType::kF32, {2}}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid tensor name")));
  EXPECT_THAT(SafetensorsWriter::Create(path, {{"__metadata__", DType::kF32, {2}}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid tensor name")));
  EXPECT_THAT(SafetensorsWriter::Create(path, {{"x", DType::kF32, {2, -1}}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative dimension")));
  EXPECT_THAT(SafetensorsWriter::Create(path, {{"x", DType::kF64, {int64_t{1} << 40, int64_t{1} << 20}}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")));
  EXPECT_TRUE(ListDirectory(dir).empty());
  {
    // Too many bytes: refused, and the error sticks.
    ASSERT_OK_AND_ASSIGN(auto writer, SafetensorsWriter::Create(path, {{"x", DType::kF32, {1}}}, {}));
    EXPECT_THAT(writer->Append("12345"),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("declares 4")));
    EXPECT_THAT(writer->Finish(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("declares 4")));
  }
  {
    // Too few: Finish names the short tensor and publishes nothing.
    ASSERT_OK_AND_ASSIGN(auto writer, SafetensorsWriter::Create(
        path, {{"a", DType::kF32, {1}}, {"b", DType::kF32, {2}}}, {}));
    ASSERT_OK(writer->Append("1234abcd"));
    EXPECT_THAT(writer->Finish(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                           HasSubstr("tensor 'b' is short")));
  }
  {
    // Abandoned midway: nothing at the final name, no temporary left.
    ASSERT_OK_AND_ASSIGN(auto writer, SafetensorsWriter::Create(path, {{"x", DType::kF32, {1}}}, {}));
    EXPECT_EQ(ListDirectory(dir).size(), 1u);  // the temporary
  }
  EXPECT_TRUE(ListDirectory(dir).empty());
  EXPECT_THAT(SafetensorsWriter::Create(dir + "/no/such/dir/a", {}, {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such/dir")));
}

TEST(SafetensorsTest, FinishReplacesAnOldFileAtomically) {
  const std::string dir = MakeTempDir("stw");
  const std::string path = dir + "/out.safetensors";
  ASSERT_OK(WriteTensors(path, {{{"old", DType::kU8, {1}}, "o"}}, {}).status());
  ASSERT_OK_AND_ASSIGN(auto writer, SafetensorsWriter::Create(path, {{"new", DType::kU8, {1}}}, {}));
  ASSERT_OK(writer->Append("n"));
  // Until Finish, readers still see the old file.
  ASSERT_OK_AND_ASSIGN(auto before, SafetensorsReader::Open(path));
  EXPECT_NE(before->Find("old"), nullptr);
  ASSERT_OK(writer->Finish().status());
  ASSERT_OK_AND_ASSIGN(auto after, SafetensorsReader::Open(path));
  EXPECT_NE(after->Find("new"), nullptr);
  EXPECT_THAT(ListDirectory(dir), ElementsAre("out.safetensors"));
}

// Interop with other readers and writers: a tiny pure-Python implementation
// (json + struct + torch.frombuffer) on Debian's /usr/bin/python3.
class PythonInteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "/usr/bin/python3 with torch (Debian's python3-torch) is "
                      "not installed";
    }
  }
  // Runs the helper; returns its stdout lines.
  std::vector<std::string> Run(const std::string& mode, const std::string& path) {
    const std::string log = MakeTempDir("py") + "/out.txt";
    auto child = pshard::testing::Subprocess::Start(
        {"/usr/bin/python3",
         pshard::testing::RunfilePath("checkpoint/testdata/safetensors_interop.py"),
         mode, path},
        {}, log);
    EXPECT_OK(child.status());
    if (!child.ok()) return {};
    auto status = (*child)->Wait(absl::Seconds(120));
    EXPECT_OK(status.status());
    EXPECT_TRUE(status.ok() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << ReadFile(log);
    return absl::StrSplit(ReadFile(log), '\n', absl::SkipEmpty());
  }
};

TEST_F(PythonInteropTest, PythonReadsWhatWeWrite) {
  const std::string path = MakeTempDir("py") + "/ours.safetensors";
  ASSERT_OK(WriteTensors(path, MixedTensors(), {{"format", "pt"}}).status());
  EXPECT_THAT(Run("read", path),
              UnorderedElementsAre("layer.weight F32 2x3 15.0", "half BF16 2 -0.5",
                                   "double F64 1 -0.125", "count I64  1099511627776.0",
                                   "empty F16 0x4 0.0",
                                   "name \"q\" \\ \xc3\xa9 U8 3 294.0", "meta format pt"));
}

TEST_F(PythonInteropTest, WeReadWhatPythonWrites) {
  const std::string path = MakeTempDir("py") + "/theirs.safetensors";
  Run("write", path);
  ASSERT_OK_AND_ASSIGN(auto reader, SafetensorsReader::Open(path));
  EXPECT_EQ(reader->metadata().at("from"), "python");
  ASSERT_NE(reader->Find("w"), nullptr);
  EXPECT_THAT(reader->Find("w")->shape, ElementsAre(2, 3));
  ASSERT_OK_AND_ASSIGN(std::string w, reader->ReadBytes("w"));
  std::vector<float> values(6);
  std::memcpy(values.data(), w.data(), 24);
  EXPECT_THAT(values, ElementsAre(0, 0.25, 0.5, 0.75, 1, 1.25));
  EXPECT_EQ(reader->Find("h")->dtype, DType::kBF16);
  ASSERT_OK_AND_ASSIGN(std::string n, reader->ReadBytes("n"));
  int64_t last = 0;
  std::memcpy(&last, n.data() + 16, 8);
  EXPECT_EQ(last, int64_t{1} << 40);
}

}  // namespace
}  // namespace pshard::checkpoint
