#include "worker/workload/random.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

TEST(RandomTest, StreamKeysDependOnEveryPart) {
  EXPECT_EQ(StreamKey(1, {2, 3}), StreamKey(1, {2, 3}));
  EXPECT_NE(StreamKey(1, {2, 3}), StreamKey(1, {3, 2}));
  EXPECT_NE(StreamKey(1, {2, 3}), StreamKey(2, {2, 3}));
  EXPECT_NE(StreamKey(1, {2}), StreamKey(1, {2, 0}));
}

TEST(RandomTest, NormalHasUnitVariance) {
  const uint64_t key = StreamKey(7, {1});
  double sum = 0, sum_sq = 0;
  constexpr int kN = 200000;
  for (int i = 0; i < kN; ++i) {
    const double x = NormalAt(key, i);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
  }
  EXPECT_NEAR(sum / kN, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / kN, 1.0, 0.02);
}

TEST(RandomTest, FillNormalHasUnitVarianceAndIsPure) {
  constexpr int kN = 200001;  // odd: the last element has no partner
  std::vector<float> a(kN), b(1001);
  FillNormal(StreamKey(7, {3}), a.data(), kN);
  FillNormal(StreamKey(7, {3}), b.data(), b.size());
  double sum = 0, sum_sq = 0, sum_pair = 0;
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(std::isfinite(a[i]));
    sum += a[i];
    sum_sq += double{a[i]} * a[i];
    if (i % 2 == 1) sum_pair += double{a[i]} * a[i - 1];
  }
  EXPECT_NEAR(sum / kN, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / kN, 1.0, 0.02);
  EXPECT_NEAR(sum_pair / (kN / 2), 0.0, 0.02);  // the two branches are uncorrelated
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(a[i], b[i]);
  // Element by element gives the same bits.
  for (int i = 0; i < kN; ++i) {
    const float one = NormalAt(StreamKey(7, {3}), i);
    ASSERT_EQ(std::memcmp(&one, &a[i], sizeof(float)), 0) << i;
  }
}

TEST(RandomTest, UniformIsInRange) {
  const uint64_t key = StreamKey(7, {2});
  for (int i = 0; i < 100000; ++i) {
    const float u = UniformAt(key, i, -0.5f, 0.5f);
    ASSERT_GE(u, -0.5f);
    ASSERT_LT(u, 0.5f);
  }
}

TEST(RandomTest, FillUniformSymmetricIsAPureFunctionOfKeyAndIndex) {
  std::vector<float> a(1000), b(500);
  FillUniformSymmetric(99, a.data(), a.size());
  FillUniformSymmetric(99, b.data(), b.size());
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(a[i], b[i]);
  FillUniformSymmetric(100, b.data(), b.size());
  int same = 0;
  for (size_t i = 0; i < b.size(); ++i) same += a[i] == b[i];
  EXPECT_LT(same, 5);
}

}  // namespace
}  // namespace pshard::worker
