// The sharded layout end to end: shards, manifest, verification, the latest
// complete checkpoint with fallback, pruning, and reads by name.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "checkpoint/test_checkpoints.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::checkpoint {
namespace {

using ::pshard::checkpoint::testing::FlipByte;
using ::pshard::checkpoint::testing::MakeParameters;
using ::pshard::checkpoint::testing::OwnedParameter;
using ::pshard::checkpoint::testing::Truncate;
using ::pshard::checkpoint::testing::WriteCheckpoint;
using ::pshard::testing::MakeTempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string Shard(const std::string& root, int64_t step, int rank, int world) {
  return absl::StrCat(StepDirectory(root, step), "/", ShardFileName(rank, world));
}

// Prune's result, or a marker that fails the comparison.
std::vector<std::string> PruneOk(const std::string& root, int keep_last) {
  auto removed = Prune(root, keep_last);
  EXPECT_OK(removed.status());
  return removed.ok() ? *removed : std::vector<std::string>{"<error>"};
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

TEST(LayoutTest, NamesOfStepsAndShards) {
  EXPECT_EQ(StepDirectory("/ck", 50), "/ck/step-50");
  EXPECT_EQ(ShardFileName(1, 3), "shard-1-of-3.safetensors");
  EXPECT_EQ(ParseStepDirectoryName("step-50"), 50);
  EXPECT_EQ(ParseStepDirectoryName("step-0"), 0);
  EXPECT_EQ(ParseStepDirectoryName("step-050"), -1);
  EXPECT_EQ(ParseStepDirectoryName("step-"), -1);
  EXPECT_EQ(ParseStepDirectoryName("step-5x"), -1);
  EXPECT_EQ(ParseStepDirectoryName("stop-5"), -1);
}

// Every parameter and its state is read back by name, whichever rank wrote
// it: at any reader world size the same bytes come back; at world 8 one
// rank owns none of the 7 parameters and writes an empty shard.
class ShardRoundTripTest : public ::testing::TestWithParam<int> {};

TEST_P(ShardRoundTripTest, EveryTensorReadsBackByName) {
  const int world = GetParam();
  const std::string root = MakeTempDir("ck");
  const std::vector<OwnedParameter> params = MakeParameters(7, 50);
  ASSERT_OK_AND_ASSIGN(Manifest written, WriteCheckpoint(root, 50, world, params));
  ASSERT_OK_AND_ASSIGN(Manifest verified, VerifyCheckpoint(StepDirectory(root, 50)));
  EXPECT_EQ(verified.step, 50);
  EXPECT_EQ(verified.world_size, world);
  EXPECT_EQ(verified.spec_fingerprint, "fp-1");
  ASSERT_THAT(verified.files, SizeIs(world));
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(verified.files[r].sha256, written.files[r].sha256);
    EXPECT_EQ(verified.files[r].size_bytes, written.files[r].size_bytes);
  }

  ASSERT_OK_AND_ASSIGN(auto reader, ShardReader::Open(StepDirectory(root, 50)));
  std::vector<std::string> names;
  for (const auto& p : params) names.push_back(p.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(reader->parameter_names(), names);
  for (const OwnedParameter& p : params) {
    SCOPED_TRACE(p.name);
    ASSERT_OK_AND_ASSIGN(auto value, reader->ReadFloats(p.name));
    EXPECT_EQ(value, p.value);
    ASSERT_OK_AND_ASSIGN(auto m, reader->ReadFloats(StateTensorName(p.name, "exp_avg")));
    EXPECT_EQ(m, p.exp_avg);
    ASSERT_OK_AND_ASSIGN(auto v, reader->ReadFloats(p.name + ".exp_avg_sq"));
    EXPECT_EQ(v, p.exp_avg_sq);
    EXPECT_EQ(reader->Find(p.name).info->shape, p.shape);
  }
  EXPECT_THAT(reader->ReadFloats("p0.weight.momentum_buffer"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("momentum_buffer")));
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShardRoundTripTest,
                         ::testing::Values(1, 2, 3, 5, 8));

// Slices (the SHARDED policy): rank r writes elements [lo_r, hi_r) of a
// parameter and of its state; the reader joins them, whole, by name.
struct SlicedCheckpoint {
  std::string step_dir;
  std::vector<float> weight;  // 2 x 5, split 0-3 | 3-8 | 8-10
  std::vector<float> exp_avg;
};

absl::StatusOr<SlicedCheckpoint> WriteSliced(
    const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  SlicedCheckpoint out;
  const std::string root = MakeTempDir("ck");
  for (int i = 0; i < 10; ++i) {
    out.weight.push_back(0.5f * i);
    out.exp_avg.push_back(-1.0f * i);
  }
  const std::vector<float> bias = {7, 8};
  const int world = static_cast<int>(ranges.size());
  Manifest manifest{3, "fp", world, {}};
  for (int rank = 0; rank < world; ++rank) {
    const auto [lo, hi] = ranges[rank];
    ParameterTensors weight{
        "w",
        FloatTensor(absl::MakeConstSpan(out.weight).subspan(lo, hi - lo)),
        {{"exp_avg",
          FloatTensor(absl::MakeConstSpan(out.exp_avg).subspan(lo, hi - lo))}},
        TensorSlice{lo, {2, 5}}};
    std::vector<ParameterTensors> mine = {weight};
    if (rank == 0) mine.push_back({"b", FloatTensor(bias, {2}), {}});
    ASSIGN_OR_RETURN(CheckpointWriter writer,
                     CheckpointWriter::Create(root, rank, world, "fp"));
    ASSIGN_OR_RETURN(ShardFileInfo file, writer.WriteShard(3, mine));
    manifest.files.push_back(std::move(file));
  }
  RETURN_IF_ERROR(WriteManifest(root, manifest));
  out.step_dir = StepDirectory(root, 3);
  return out;
}

TEST(ShardReaderTest, SlicesOfATensorReadBackWhole) {
  ASSERT_OK_AND_ASSIGN(SlicedCheckpoint ck, WriteSliced({{0, 3}, {3, 8}, {8, 10}}));
  ASSERT_OK_AND_ASSIGN(auto reader, ShardReader::Open(ck.step_dir));
  EXPECT_THAT(reader->parameter_names(), ElementsAre("b", "w"));
  ASSERT_OK_AND_ASSIGN(std::vector<float> w, reader->ReadFloats("w"));
  EXPECT_EQ(w, ck.weight);
  ASSERT_OK_AND_ASSIGN(std::vector<float> m, reader->ReadFloats("w.exp_avg"));
  EXPECT_EQ(m, ck.exp_avg);
  const ShardReader::Location where = reader->Find("w");
  ASSERT_NE(where.info, nullptr);
  EXPECT_EQ(where.shard, nullptr);
  EXPECT_THAT(where.info->shape, ElementsAre(2, 5));
  EXPECT_EQ(where.info->byte_size(), 40);
  std::vector<char> small(39);
  EXPECT_THAT(reader->ReadInto("w", absl::MakeSpan(small)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("40 bytes")));
  ASSERT_OK_AND_ASSIGN(std::vector<float> b, reader->ReadFloats("b"));
  EXPECT_EQ(b, std::vector<float>({7, 8}));
}

TEST(ShardReaderTest, SlicesThatDoNotTileAreRefused) {
  ASSERT_OK_AND_ASSIGN(SlicedCheckpoint gap, WriteSliced({{0, 3}, {4, 10}}));
  EXPECT_THAT(ShardReader::Open(gap.step_dir),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("'w"), HasSubstr("missing"))));
  ASSERT_OK_AND_ASSIGN(SlicedCheckpoint overlap, WriteSliced({{0, 5}, {3, 10}}));
  EXPECT_THAT(ShardReader::Open(overlap.step_dir),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("in two slices")));
  ASSERT_OK_AND_ASSIGN(SlicedCheckpoint short_end, WriteSliced({{0, 3}, {3, 9}}));
  EXPECT_THAT(ShardReader::Open(short_end.step_dir),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cover 9 of its 10")));
}

TEST(CheckpointWriterTest, RefusesASliceOutsideItsParameter) {
  const std::string root = MakeTempDir("ck");
  ASSERT_OK_AND_ASSIGN(CheckpointWriter writer,
                       CheckpointWriter::Create(root, 0, 1, "fp"));
  const std::vector<float> values(4, 1.0f);
  ParameterTensors past_end{"w", FloatTensor(values), {}, TensorSlice{7, {10}}};
  EXPECT_THAT(writer.WriteShard(1, {past_end}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'w'"), HasSubstr("at offset 7"))));
  ParameterTensors two_d{"w", FloatTensor(values, {2, 2}), {}, TensorSlice{0, {10}}};
  EXPECT_THAT(writer.WriteShard(1, {two_d}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1-D")));
}

// More ranks than buckets: a rank that owns nothing writes an empty shard
// (its parameter list "[]"), and the checkpoint opens and reads.
TEST(ShardReaderTest, ARankThatOwnsNothingWritesAnEmptyShard) {
  const std::string root = MakeTempDir("ck");
  const std::vector<OwnedParameter> params = MakeParameters(2, 5);
  ASSERT_OK(WriteCheckpoint(root, 5, 3, params, {0, 1}).status());
  ASSERT_OK_AND_ASSIGN(auto reader, ShardReader::Open(StepDirectory(root, 5)));
  EXPECT_THAT(reader->parameter_names(), SizeIs(2));
  ASSERT_OK_AND_ASSIGN(auto value, reader->ReadFloats(params[1].name));
  EXPECT_EQ(value, params[1].value);
}

// A program's own state rides in its rank's shard: any bytes (NULs and
// all), read back by rank; a rank that saved none is absent; too large is
// refused before anything is written.
TEST(ShardReaderTest, ProgramStatesReadBackByRank) {
  const std::string root = MakeTempDir("ck");
  const auto params = MakeParameters(2, 3);
  ASSERT_OK_AND_ASSIGN(CheckpointWriter w0, CheckpointWriter::Create(root, 0, 3, "fp"));
  ASSERT_OK_AND_ASSIGN(CheckpointWriter w1, CheckpointWriter::Create(root, 1, 3, "fp"));
  ASSERT_OK_AND_ASSIGN(CheckpointWriter w2, CheckpointWriter::Create(root, 2, 3, "fp"));
  const std::string binary("\0\xff{\"a\": 1}\n\0", 12);
  ASSERT_OK_AND_ASSIGN(ShardFileInfo f0, w0.WriteShard(4, {params[0].View()}, binary));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo f1, w1.WriteShard(4, {params[1].View()}));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo f2, w2.WriteShard(4, {}, std::string()));
  ASSERT_OK(WriteManifest(root, {4, "fp", 3, {f0, f1, f2}}));
  ASSERT_OK_AND_ASSIGN(auto reader, ShardReader::Open(StepDirectory(root, 4)));
  ASSERT_OK_AND_ASSIGN(auto states, reader->ProgramStates());
  EXPECT_THAT(states, ElementsAre(std::pair<const int, std::string>(0, binary),
                                  std::pair<const int, std::string>(2, "")));
  // Not a tensor: the parameters are what they were.
  EXPECT_THAT(reader->parameter_names(), SizeIs(2));

  const std::string too_big(kMaxProgramStateBytes + 1, 'x');
  EXPECT_THAT(w0.WriteShard(5, {params[0].View()}, too_big),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("program state of 16777217 bytes: at most 16777216")));
  EXPECT_FALSE(Exists(StepDirectory(root, 5)));
}

TEST(CheckpointWriterTest, RefusesBadArgumentsNamingThem) {
  const std::string root = MakeTempDir("ck");
  EXPECT_THAT(CheckpointWriter::Create("", 0, 1, "fp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("directory")));
  EXPECT_THAT(CheckpointWriter::Create(root, 0, 0, "fp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world_size 0")));
  EXPECT_THAT(CheckpointWriter::Create(root, 2, 2, "fp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 outside [0, 2)")));
  ASSERT_OK_AND_ASSIGN(CheckpointWriter writer, CheckpointWriter::Create(root, 0, 1, "fp"));
  const std::vector<float> x = {1, 2, 3};
  EXPECT_THAT(writer.WriteShard(-1, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step -1")));
  EXPECT_THAT(writer.WriteShard(1, {{"w", FloatTensor(x, {2}), {}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'w': shape [2] of F32 needs 8 bytes but 12")));
  EXPECT_THAT(writer.WriteShard(1, {{"w", FloatTensor(x), {}}, {"w", FloatTensor(x), {}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w' appears twice")));
  EXPECT_THAT(writer.WriteShard(1, {{"w", FloatTensor(x), {{"", FloatTensor(x)}}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty name")));
  EXPECT_THAT(writer.WriteShard(1, {{"w", FloatTensor(x), {}}, {"w.m", FloatTensor(x), {}}, }),
              IsOk());  // distinct names, however they look
  EXPECT_THAT(writer.WriteShard(1, {{"w", FloatTensor(x), {{"m", FloatTensor(x)}}},
                                    {"w.m", FloatTensor(x), {}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w.m' appears twice")));
  // Nothing was written by the refused calls.
  EXPECT_FALSE(Exists(StepDirectory(root, -1)));
}

TEST(ManifestTest, JsonRoundTripAndFieldErrors) {
  const std::string sha(64, 'a');
  const Manifest manifest{7, "fp", 2,
                          {{ShardFileName(0, 2), 0, 10, sha}, {ShardFileName(1, 2), 1, 20, sha}}};
  const std::string json = ManifestToJson(manifest);
  ASSERT_OK_AND_ASSIGN(Manifest back, ManifestFromJson(json, "m.json"));
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.files[1].size_bytes, 20);

  struct Case { const char* what; std::string json; const char* message; };
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string j = json;
    const size_t at = j.find(from);
    return at == std::string::npos ? std::string("missing ") + from
                                   : j.replace(at, from.size(), to);
  };
  const std::vector<Case> cases = {
      {"not json", "{", "not a JSON object"},
      {"format", replace("pshard-checkpoint-v1", "other"), "'format' is 'other'"},
      {"step type", replace("\"step\": 7", "\"step\": \"7\""), "'step' has the wrong type"},
      {"step negative", replace("\"step\": 7", "\"step\": -7"), "'step' must be a non-negative integer"},
      {"no world", replace("\"world_size\": 2", "\"world\": 2"), "'world_size' is missing"},
      {"world mismatch", replace("\"world_size\": 2", "\"world_size\": 3"), "lists 2 files for world_size 3"},
      {"file name", replace("shard-1-of-2", "shard-9-of-2"), "files[1] is named"},
      {"file size", replace("\"size_bytes\": 20", "\"size_bytes\": 2.5"), "'files[1].size_bytes' must be"},
      {"sha", replace(sha, "xyz"), "sha256 is not 64 lowercase hex digits"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_THAT(ManifestFromJson(c.json, "m.json"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("m.json"), HasSubstr(c.message))));
  }
}

TEST(ManifestTest, WrittenOnlyWhenEveryShardIsThere) {
  const std::string root = MakeTempDir("ck");
  const auto params = MakeParameters(4, 1);
  ASSERT_OK_AND_ASSIGN(Manifest manifest, WriteCheckpoint(root, 1, 2, params));
  const std::string dir = StepDirectory(root, 1);
  ASSERT_OK(::unlink((dir + "/manifest.json").c_str()) == 0 ? absl::OkStatus()
                                                            : absl::InternalError("unlink"));
  EXPECT_THAT(ReadManifest(dir), StatusIs(absl::StatusCode::kNotFound, HasSubstr("incomplete")));

  Manifest wrong_size = manifest;
  wrong_size.files[1].size_bytes += 1;
  EXPECT_THAT(WriteManifest(root, wrong_size),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("shard-1-of-2.safetensors' has")));
  ::unlink(Shard(root, 1, 1, 2).c_str());
  EXPECT_THAT(WriteManifest(root, manifest),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("shard-1-of-2.safetensors' is missing")));
  EXPECT_FALSE(Exists(dir + "/manifest.json"));
  Manifest invalid = manifest;
  invalid.files.pop_back();
  EXPECT_THAT(WriteManifest(root, invalid),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 files for world_size 2")));

  // A manifest whose step is not its directory's.
  ASSERT_OK(WriteCheckpoint(root, 2, 1, params).status());
  std::ifstream in(StepDirectory(root, 2) + "/manifest.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  ASSERT_OK(MakeDirectoryDurably(StepDirectory(root, 3)));
  WriteText(StepDirectory(root, 3) + "/manifest.json", text);
  EXPECT_THAT(ReadManifest(StepDirectory(root, 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("manifest step 2 in directory of step 3")));
}

TEST(VerifyTest, TruncatedOrCorruptedShardsAreRefusedNamingTheFile) {
  const std::string root = MakeTempDir("ck");
  ASSERT_OK(WriteCheckpoint(root, 10, 2, MakeParameters(5, 10)).status());
  ASSERT_OK(WriteCheckpoint(root, 20, 2, MakeParameters(5, 20)).status());
  const std::string shard10 = Shard(root, 10, 1, 2);
  const std::string shard20 = Shard(root, 20, 0, 2);
  FlipByte(shard10, -3);  // inside the data: only the hash sees it
  struct stat st;
  ASSERT_EQ(::stat(shard20.c_str(), &st), 0);
  Truncate(shard20, st.st_size - 5);
  EXPECT_THAT(VerifyCheckpoint(StepDirectory(root, 10)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(shard10), HasSubstr("is corrupted: its SHA-256"))));
  EXPECT_THAT(VerifyCheckpoint(StepDirectory(root, 20)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(shard20), HasSubstr("truncated"))));
  EXPECT_THAT(ShardReader::Open(StepDirectory(root, 20)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(shard20)));
  // Without hashes the reader still refuses the truncated shard (size), and
  // its own header check names the file.
  EXPECT_THAT(ShardReader::Open(StepDirectory(root, 20), ShardReader::Verify::kSizesOnly),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(shard20)));
  ::unlink(shard10.c_str());
  EXPECT_THAT(VerifyCheckpoint(StepDirectory(root, 10)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(shard10)));
}

TEST(ShardReaderTest, RefusesShardsThatDoNotBelongToTheManifest) {
  const std::string root = MakeTempDir("ck");
  const auto params = MakeParameters(4, 1);
  ASSERT_OK(WriteCheckpoint(root, 1, 2, params).status());
  // Rank 1's shard of another job (other fingerprint), with a manifest that
  // hashes it: every byte checks out, the metadata does not.
  const std::string other = MakeTempDir("ck");
  ASSERT_OK(WriteCheckpoint(other, 1, 2, params, {}, "fp-other").status());
  ASSERT_EQ(::rename(Shard(other, 1, 1, 2).c_str(), Shard(root, 1, 1, 2).c_str()), 0);
  ASSERT_OK_AND_ASSIGN(Manifest manifest, ReadManifest(StepDirectory(root, 1)));
  ASSERT_OK_AND_ASSIGN(FileDigest digest, DigestFile(Shard(root, 1, 1, 2)));
  manifest.files[1].size_bytes = digest.size_bytes;
  manifest.files[1].sha256 = digest.sha256;
  ASSERT_OK(WriteManifest(root, manifest));
  EXPECT_THAT(ShardReader::Open(StepDirectory(root, 1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("shard-1-of-2"), HasSubstr("pshard.spec_fingerprint"),
                             HasSubstr("fp-other"))));

  // The same parameter in two shards.
  const std::string dup = MakeTempDir("ck");
  ASSERT_OK(WriteCheckpoint(dup, 1, 1, params).status());
  ASSERT_OK_AND_ASSIGN(CheckpointWriter w0, CheckpointWriter::Create(dup, 0, 2, "fp-1"));
  ASSERT_OK_AND_ASSIGN(CheckpointWriter w1, CheckpointWriter::Create(dup, 1, 2, "fp-1"));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo f0, w0.WriteShard(5, {params[0].View()}));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo f1, w1.WriteShard(5, {params[0].View()}));
  ASSERT_OK(WriteManifest(dup, {5, "fp-1", 2, {f0, f1}}));
  EXPECT_THAT(ShardReader::Open(StepDirectory(dup, 5)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("'p0.weight' is in both"), HasSubstr("shard-0-of-2"),
                             HasSubstr("shard-1-of-2"))));
}

TEST(CatalogTest, LatestCompleteSkipsIncompleteAndCorruptSayingWhy) {
  const std::string root = MakeTempDir("ck");
  EXPECT_THAT(LatestCompleteCheckpoint(root + "/absent"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no checkpoint")));
  ASSERT_OK(WriteCheckpoint(root, 10, 2, MakeParameters(3, 10)).status());
  ASSERT_OK(WriteCheckpoint(root, 20, 3, MakeParameters(3, 20)).status());
  ASSERT_OK(WriteCheckpoint(root, 30, 2, MakeParameters(3, 30)).status());
  FlipByte(Shard(root, 30, 1, 2), -1);
  // Step 40: shards in, no manifest (the coordinator died before the commit).
  ASSERT_OK_AND_ASSIGN(CheckpointWriter writer, CheckpointWriter::Create(root, 0, 1, "fp-1"));
  ASSERT_OK(writer.WriteShard(40, {MakeParameters(1, 40)[0].View()}).status());
  ASSERT_OK(MakeDirectoryDurably(root + "/not-a-step"));

  ASSERT_OK_AND_ASSIGN(CompleteCheckpoint latest, LatestCompleteCheckpoint(root));
  EXPECT_EQ(latest.step_dir, StepDirectory(root, 20));
  EXPECT_EQ(latest.manifest.step, 20);
  EXPECT_EQ(latest.manifest.world_size, 3);
  ASSERT_THAT(latest.skipped, SizeIs(2));
  EXPECT_THAT(latest.skipped[0], HasSubstr("step-40 is incomplete"));
  EXPECT_THAT(latest.skipped[1], AllOf(HasSubstr("step-30/shard-1-of-2.safetensors"),
                                       HasSubstr("corrupted")));
  ASSERT_OK_AND_ASSIGN(auto steps, ListCheckpointSteps(root));
  EXPECT_THAT(steps, ElementsAre(10, 20, 30, 40));

  // A step directory resolves to itself; a corrupt one is refused.
  ASSERT_OK_AND_ASSIGN(CompleteCheckpoint ten, ResolveCheckpoint(StepDirectory(root, 10)));
  EXPECT_EQ(ten.manifest.step, 10);
  EXPECT_THAT(ResolveCheckpoint(StepDirectory(root, 30)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("shard-1-of-2")));
  ASSERT_OK_AND_ASSIGN(CompleteCheckpoint resolved, ResolveCheckpoint(root));
  EXPECT_EQ(resolved.manifest.step, 20);

  // Nothing complete at all: NotFound listing every reason.
  FlipByte(Shard(root, 20, 2, 3), 10);
  FlipByte(Shard(root, 10, 0, 2), -1);
  EXPECT_THAT(LatestCompleteCheckpoint(root),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no complete checkpoint"), HasSubstr("step-40"),
                             HasSubstr("step-30"), HasSubstr("step-20"),
                             HasSubstr("step-10"))));
}

TEST(CatalogTest, PruneRemovesOldOnesOnlyAfterANewerOneIsComplete) {
  const std::string root = MakeTempDir("ck");
  const auto params = MakeParameters(3, 0);
  EXPECT_THAT(Prune(root, 0), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("keep_last 0")));
  ASSERT_OK(WriteCheckpoint(root, 10, 2, params).status());
  // Step 20 is being written: shards but no manifest yet.
  ASSERT_OK_AND_ASSIGN(CheckpointWriter writer, CheckpointWriter::Create(root, 0, 2, "fp-1"));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo f0, writer.WriteShard(20, {params[0].View()}));
  EXPECT_THAT(PruneOk(root, 1), (IsEmpty()));
  EXPECT_TRUE(Exists(StepDirectory(root, 10)));
  EXPECT_TRUE(Exists(Shard(root, 20, 0, 2)));

  // Step 20 completes: step 10 goes.
  ASSERT_OK_AND_ASSIGN(CheckpointWriter writer1, CheckpointWriter::Create(root, 1, 2, "fp-1"));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo f1, writer1.WriteShard(20, {params[1].View()}));
  ASSERT_OK(WriteManifest(root, {20, "fp-1", 2, {f0, f1}}));
  EXPECT_THAT(PruneOk(root, 2), (IsEmpty()));
  EXPECT_THAT(PruneOk(root, 1), (ElementsAre(StepDirectory(root, 10))));
  EXPECT_FALSE(Exists(StepDirectory(root, 10)));

  // A corrupt newest one does not count: nothing older is removed for it.
  ASSERT_OK(WriteCheckpoint(root, 30, 1, params).status());
  FlipByte(Shard(root, 30, 0, 1), -1);
  EXPECT_THAT(PruneOk(root, 1), (IsEmpty()));
  EXPECT_TRUE(Exists(StepDirectory(root, 20)));

  // keep_last 2 with 20, 40, 50 complete and a failed 45 between them: 20
  // goes; 45 (older than the kept 50 but newer than the kept 40) stays.
  ASSERT_OK(WriteCheckpoint(root, 40, 2, params).status());
  ASSERT_OK(MakeDirectoryDurably(StepDirectory(root, 45)));
  ASSERT_OK(WriteCheckpoint(root, 50, 3, params).status());
  ASSERT_OK(MakeDirectoryDurably(StepDirectory(root, 60)));  // in progress
  EXPECT_THAT(PruneOk(root, 2), (ElementsAre(StepDirectory(root, 20),
                                                               StepDirectory(root, 30))));
  ASSERT_OK_AND_ASSIGN(auto steps, ListCheckpointSteps(root));
  EXPECT_THAT(steps, ElementsAre(40, 45, 50, 60));
  ASSERT_OK_AND_ASSIGN(CompleteCheckpoint latest, LatestCompleteCheckpoint(root));
  EXPECT_EQ(latest.manifest.step, 50);
}

// kill -9 of a writer midway (a real process): what is left is an
// incomplete step that never counts and that Prune later removes.
TEST(CatalogTest, AWriterKilledMidwayLeavesAnIncompleteStep) {
  const std::string root = MakeTempDir("kill");
  ASSERT_OK(WriteCheckpoint(root, 10, 1, MakeParameters(2, 10)).status());
  OwnedParameter big = MakeParameters(1, 20)[0];
  big.shape = {32 << 20};
  big.value.assign(32 << 20, 1.0f);
  big.exp_avg.assign(32 << 20, 2.0f);
  big.exp_avg_sq.assign(32 << 20, 3.0f);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto writer = CheckpointWriter::Create(root, 0, 1, "fp-1");
    const bool ok = writer.ok() && writer->WriteShard(20, {big.View()}).ok();
    ::_exit(ok ? 0 : 1);
  }
  // Kill it once its temporary file is there (it writes 384 MiB).
  const bool started = pshard::testing::WaitUntil(
      [&] {
        for (const std::string& name :
             pshard::testing::ListDirectory(StepDirectory(root, 20))) {
          if (name.find(".tmp.") != std::string::npos) return true;
        }
        return false;
      },
      absl::Seconds(60));
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(started);
  if (WIFEXITED(status)) {
    GTEST_SKIP() << "the writer finished before it could be killed";
  }
  EXPECT_FALSE(Exists(Shard(root, 20, 0, 1)));  // only the temporary
  ASSERT_OK_AND_ASSIGN(CompleteCheckpoint latest, LatestCompleteCheckpoint(root));
  EXPECT_EQ(latest.manifest.step, 10);
  EXPECT_THAT(latest.skipped, ElementsAre(HasSubstr("step-20 is incomplete")));
  // Once step 30 is complete, keep_last 1 removes 10 and the debris of 20.
  ASSERT_OK(WriteCheckpoint(root, 30, 1, MakeParameters(2, 30)).status());
  EXPECT_THAT(PruneOk(root, 1),
              ElementsAre(StepDirectory(root, 10), StepDirectory(root, 20)));
  EXPECT_FALSE(Exists(StepDirectory(root, 20)));
}

}  // namespace
}  // namespace pshard::checkpoint
