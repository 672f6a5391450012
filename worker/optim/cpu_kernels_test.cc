#include "worker/optim/cpu_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pshard::worker::cpu {
namespace {

std::vector<float> RandomVector(std::mt19937& rng, int64_t n, float lo,
                                float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Bitwise equality, so that -0.0f vs 0.0f and NaN payloads count too.
void ExpectBitwiseEqual(const std::vector<float>& a, const std::vector<float>& b,
                        const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << "[" << i << "]: " << a[i] << " vs " << b[i];
  }
}

// Sizes around the 8-wide vector length and its epilogue.
const int64_t kSizes[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1029};

TEST(SgdStepTest, VectorisedMatchesReferenceForEveryVariant) {
  std::mt19937 rng(1);
  for (int64_t n : kSizes) {
    for (int variant = 0; variant < 16; ++variant) {
      const bool wd = variant & 1;
      const bool momentum = variant & 2;
      const bool first = variant & 4;
      const bool nesterov = momentum && (variant & 8);
      const SgdScalars s = MakeSgdScalars(
          0.05, momentum ? 0.9 : 0.0, (momentum && !nesterov) ? 0.25 : 0.0,
          nesterov, wd ? 0.01 : 0.0, first);
      std::vector<float> p = RandomVector(rng, n, -2, 2);
      const std::vector<float> g = RandomVector(rng, n, -1, 1);
      std::vector<float> buf = RandomVector(rng, n, -1, 1);
      std::vector<float> p_ref = p, buf_ref = buf;
      SgdStep(p.data(), g.data(), buf.data(), n, s);
      SgdStepReference(p_ref.data(), g.data(), buf_ref.data(), n, s);
      SCOPED_TRACE(testing::Message() << "n=" << n << " variant=" << variant);
      ExpectBitwiseEqual(p, p_ref, "param");
      ExpectBitwiseEqual(buf, buf_ref, "momentum_buffer");
    }
  }
}

TEST(SgdStepTest, NoMomentumNeedsNoBuffer) {
  std::vector<float> p = {1.0f, -2.0f, 3.0f};
  const std::vector<float> g = {0.5f, 0.5f, -1.0f};
  SgdStep(p.data(), g.data(), nullptr, 3, MakeSgdScalars(0.5, 0, 0, false, 0, true));
  EXPECT_EQ(p, (std::vector<float>{0.75f, -2.25f, 3.5f}));
}

TEST(SgdStepTest, FirstMomentumStepClonesGradientWithoutDampening) {
  std::vector<float> p = {1.0f};
  const std::vector<float> g = {2.0f};
  std::vector<float> buf = {123.0f};  // ignored on the first step
  SgdStep(p.data(), g.data(), buf.data(), 1,
          MakeSgdScalars(0.25, 0.9, 0.5, false, 0, /*first_step=*/true));
  EXPECT_EQ(buf[0], 2.0f);
  EXPECT_EQ(p[0], 0.5f);
  // Second step: buf = 0.9 * 2 + 0.5 * 2 = 2.8; p = 0.5 - 0.25 * 2.8.
  SgdStep(p.data(), g.data(), buf.data(), 1,
          MakeSgdScalars(0.25, 0.9, 0.5, false, 0, /*first_step=*/false));
  EXPECT_FLOAT_EQ(buf[0], 2.8f);
  EXPECT_FLOAT_EQ(p[0], 0.5f - 0.25f * 2.8f);
}

TEST(AdamStepTest, VectorisedMatchesReferenceForEveryVariant) {
  std::mt19937 rng(2);
  for (int64_t n : kSizes) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool decoupled = variant == 2;
      const double wd = variant == 0 ? 0.0 : 0.1;
      for (int64_t step : {1, 2, 10, 1000}) {
        const AdamScalars s =
            MakeAdamScalars(0.01, 0.9, 0.999, 1e-8, wd, decoupled, step);
        std::vector<float> p = RandomVector(rng, n, -2, 2);
        const std::vector<float> g = RandomVector(rng, n, -1, 1);
        std::vector<float> m = RandomVector(rng, n, -0.1f, 0.1f);
        std::vector<float> v = RandomVector(rng, n, 0, 0.01f);
        std::vector<float> p_ref = p, m_ref = m, v_ref = v;
        AdamStep(p.data(), g.data(), m.data(), v.data(), n, s);
        AdamStepReference(p_ref.data(), g.data(), m_ref.data(), v_ref.data(),
                          n, s);
        SCOPED_TRACE(testing::Message() << "n=" << n << " variant=" << variant
                                        << " step=" << step);
        ExpectBitwiseEqual(p, p_ref, "param");
        ExpectBitwiseEqual(m, m_ref, "exp_avg");
        ExpectBitwiseEqual(v, v_ref, "exp_avg_sq");
      }
    }
  }
}

TEST(AdamStepTest, ScalarsFollowTorchHostArithmetic) {
  const AdamScalars s = MakeAdamScalars(1e-3, 0.9, 0.999, 1e-8, 0.0, false, 1);
  // bias_correction1 = 1 - 0.9 (in double), step_size = lr / that.
  EXPECT_EQ(s.neg_step_size, static_cast<float>(-(1e-3 / (1.0 - 0.9))));
  EXPECT_EQ(s.bias_correction2_sqrt,
            static_cast<float>(std::sqrt(1.0 - 0.999)));
  EXPECT_EQ(s.one_minus_beta1, static_cast<float>(1.0 - 0.9));
  EXPECT_FALSE(s.decoupled);

  const AdamScalars w = MakeAdamScalars(1e-2, 0.9, 0.999, 1e-8, 0.5, true, 3);
  EXPECT_TRUE(w.decoupled);
  EXPECT_EQ(w.weight_decay, 0.0f);
  EXPECT_EQ(w.decay, static_cast<float>(1.0 - 1e-2 * 0.5));
  EXPECT_EQ(w.neg_step_size,
            static_cast<float>(-(1e-2 / (1.0 - std::pow(0.9, 3.0)))));
}

TEST(AdamStepTest, FirstStepMovesEachParameterByAboutLr) {
  // With zero moments, step 1 gives m_hat = g and v_hat = g^2, so each
  // parameter moves by lr * sign(g) (up to eps).
  std::vector<float> p = {0.0f, 1.0f, -1.0f};
  const std::vector<float> g = {3.0f, -0.5f, 1e-3f};
  std::vector<float> m(3, 0.0f), v(3, 0.0f);
  AdamStep(p.data(), g.data(), m.data(), v.data(), 3,
           MakeAdamScalars(0.1, 0.9, 0.999, 1e-8, 0, false, 1));
  EXPECT_NEAR(p[0], -0.1f, 1e-6);
  EXPECT_NEAR(p[1], 1.1f, 1e-6);
  EXPECT_NEAR(p[2], -1.1f, 1e-5);
}

}  // namespace
}  // namespace pshard::worker::cpu
