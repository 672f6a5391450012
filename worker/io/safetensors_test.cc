#include "worker/io/safetensors.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::worker {
namespace {

using ::pshard::testing::ListDirectory;
using ::pshard::testing::MakeTempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A file image: length prefix, `header` verbatim, then `data`.
std::string Image(const std::string& header, const std::string& data) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  return out + header + data;
}

std::string FloatBytes(std::vector<float> values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * 4);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(SafetensorsTest, RoundTripKeepsWriteOrderNamesShapesAndData) {
  const std::string dir = MakeTempDir("roundtrip");
  const std::string path = dir + "/params.safetensors";
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<float> b = {0.5f, 9.0f};
  const std::vector<float> empty;
  std::vector<SafetensorsTensorView> tensors = {
      {"layers.2.weight", {2, 3}, w},
      {"layers.2.bias", {2}, b},
      {"weird \"name\"\n", {0, 4}, empty},
      {"scalar", {}, absl::MakeConstSpan(b).subspan(1, 1)},
  };
  ASSERT_OK(WriteSafetensorsAtomic(path, tensors));
  EXPECT_THAT(ListDirectory(dir), ElementsAre("params.safetensors"));

  ASSERT_OK_AND_ASSIGN(std::vector<SafetensorsTensor> read,
                       ReadSafetensors(path));
  ASSERT_EQ(read.size(), 4u);
  EXPECT_EQ(read[0].name, "layers.2.weight");
  EXPECT_THAT(read[0].shape, ElementsAre(2, 3));
  EXPECT_EQ(read[0].data, w);
  EXPECT_EQ(read[0].dtype, "F32");
  EXPECT_EQ(read[1].name, "layers.2.bias");
  EXPECT_EQ(read[1].data, b);
  EXPECT_EQ(read[2].name, "weird \"name\"\n");
  EXPECT_THAT(read[2].shape, ElementsAre(0, 4));
  EXPECT_TRUE(read[2].data.empty());
  EXPECT_EQ(read[3].name, "scalar");
  EXPECT_TRUE(read[3].shape.empty());
  EXPECT_THAT(read[3].data, ElementsAre(9.0f));

  // Overwrite atomically with the owning overload.
  ASSERT_OK(WriteSafetensorsAtomic(path, absl::MakeConstSpan(read).subspan(1, 1)));
  ASSERT_OK_AND_ASSIGN(read, ReadSafetensors(path));
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].name, "layers.2.bias");
  EXPECT_THAT(ListDirectory(dir), ElementsAre("params.safetensors"));
}

TEST(SafetensorsTest, HeaderIsPaddedToEightBytes) {
  const std::vector<float> x = {1.0f};
  ASSERT_OK_AND_ASSIGN(std::string bytes,
                       SerializeSafetensors({{"x", {1}, x}}));
  EXPECT_EQ((bytes.size() - 4) % 8, 0u);
}

TEST(SafetensorsTest, ReadsFilesOfTheReferenceLayoutOrderedByOffset) {
  // Header keys in a different order from the data, plus __metadata__.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("b":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}  )";
  const std::string path =
      MakeTempDir("safetensors") + "/reference.safetensors";
  WriteFile(path, Image(header, FloatBytes({1, 2, 3, 4})));
  ASSERT_OK_AND_ASSIGN(auto tensors, ReadSafetensors(path));
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].name, "b");
  EXPECT_THAT(tensors[0].shape, ElementsAre(1, 2));
  EXPECT_THAT(tensors[0].data, ElementsAre(1, 2));
  EXPECT_EQ(tensors[1].name, "a");
  EXPECT_THAT(tensors[1].data, ElementsAre(3, 4));
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadSafetensors(MakeTempDir("safetensors") +
                              "/does-not-exist.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does-not-exist")));
}

struct BadCase {
  const char* what;
  std::string bytes;
  const char* message;
};

TEST(SafetensorsTest, RejectsMalformedFiles) {
  const std::string data8 = FloatBytes({1, 2});
  std::string huge_len(8, '\xff');
  std::string len_2_40 = std::string("\0\0\0\0\0\1\0\0", 8);
  const std::vector<BadCase> cases = {
      {"empty", "", "truncated"},
      {"short prefix", "abc", "truncated"},
      {"huge header length", huge_len + "{}", "exceeds the limit"},
      {"header length 2^40", len_2_40 + "{}", "exceeds the limit"},
      {"header past the end", Image("{}", "").substr(0, 9), "truncated"},
      {"not json", Image("{nope", ""), "not a JSON object"},
      {"json array", Image("[1,2]", ""), "not a JSON object"},
      {"entry not object", Image(R"({"a":3})", ""), "'a': header entry is not an object"},
      {"missing field", Image(R"({"a":{"dtype":"F32","shape":[1]}})", ""),
       "needs dtype, shape and data_offsets"},
      {"unknown field",
       Image(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}})",
             FloatBytes({1})),
       "unknown header field 'x'"},
      {"f16", Image(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", FloatBytes({1})),
       "tensor 'w' has dtype F16; only F32 is supported"},
      {"dtype not string", Image(R"({"w":{"dtype":1,"shape":[2],"data_offsets":[0,8]}})", data8),
       "dtype is not a string"},
      {"offset past end", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", data8),
       "outside the data section"},
      {"begin after end", Image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data8),
       "outside the data section"},
      {"negative offset", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data8),
       "non-negative integer"},
      {"fractional offset", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}})", data8),
       "non-negative integer"},
      {"offset too large", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,1e300]}})", data8),
       "non-negative integer"},
      {"one offset", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8),
       "[begin, end]"},
      {"size mismatch", Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", data8),
       "needs 4"},
      {"huge shape", Image(R"({"w":{"dtype":"F32","shape":[9007199254740992,9007199254740992],"data_offsets":[0,8]}})", data8),
       "larger than the file's data section"},
      {"shape not list", Image(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", data8),
       "shape must be a list"},
      {"overlap",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
             data8),
       "overlap"},
      {"bad metadata", Image(R"({"__metadata__":{"k":1}})", ""), "__metadata__ value 'k'"},
      {"empty name", Image(R"({"":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", FloatBytes({1})),
       "empty name"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_THAT(ParseSafetensors(c.bytes, "mem.safetensors"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(c.message)));
    // The file reader validates the same way and names the path.
    const std::string path =
        MakeTempDir("safetensors") + "/bad.safetensors";
    WriteFile(path, c.bytes);
    EXPECT_THAT(ReadSafetensors(path),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path)));
  }
}

TEST(SafetensorsTest, CorruptedFilesNeverCrash) {
  const std::vector<float> w(37, 0.25f);
  const std::vector<float> b(5, -1.0f);
  ASSERT_OK_AND_ASSIGN(const std::string good,
                       SerializeSafetensors({{"w", {37}, w}, {"b", {5}, b}}));
  std::mt19937 rng(7);
  int ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    auto result = ParseSafetensors(bytes);
    if (result.ok()) {
      ++ok;
      for (const auto& t : *result) {
        int64_t numel = 1;
        for (int64_t d : t.shape) numel *= d;
        EXPECT_EQ(numel, static_cast<int64_t>(t.data.size()));
      }
    } else {
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_GT(ok, 0);  // flips inside float data are still valid files
}

TEST(SafetensorsTest, WriteRejectsBadTensorsAndLeavesNoFile) {
  const std::string dir = MakeTempDir("badwrite");
  const std::vector<float> x = {1, 2, 3};
  EXPECT_THAT(WriteSafetensorsAtomic(dir + "/a", {{"x", {2}, x}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'x': shape [2] has 2 elements but 3")));
  EXPECT_THAT(WriteSafetensorsAtomic(dir + "/a", {{"x", {3}, x}, {"x", {3}, x}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  EXPECT_THAT(WriteSafetensorsAtomic(dir + "/a", {{"", {3}, x}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  EXPECT_TRUE(ListDirectory(dir).empty());
  EXPECT_THAT(WriteSafetensorsAtomic(dir + "/no/such/dir/a", {{"x", {3}, x}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such/dir")));
}

}  // namespace
}  // namespace pshard::worker
