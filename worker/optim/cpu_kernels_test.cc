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
    for (int variant = 0; variant < 6; ++variant) {
      const bool decoupled = variant % 3 == 2;
      const double wd = variant % 3 == 0 ? 0.0 : 0.1;
      const bool amsgrad = variant >= 3;
      for (int64_t step : {1, 2, 10, 1000}) {
        const AdamScalars s = MakeAdamScalars(0.01, 0.9, 0.999, 1e-8, wd,
                                              decoupled, step, amsgrad);
        std::vector<float> p = RandomVector(rng, n, -2, 2);
        const std::vector<float> g = RandomVector(rng, n, -1, 1);
        std::vector<float> m = RandomVector(rng, n, -0.1f, 0.1f);
        std::vector<float> v = RandomVector(rng, n, 0, 0.01f);
        // About half above the new exp_avg_sq, half below.
        std::vector<float> vmax = RandomVector(rng, n, 0, 0.02f);
        std::vector<float> p_ref = p, m_ref = m, v_ref = v, vmax_ref = vmax;
        AdamStep(p.data(), g.data(), m.data(), v.data(),
                 amsgrad ? vmax.data() : nullptr, n, s);
        AdamStepReference(p_ref.data(), g.data(), m_ref.data(), v_ref.data(),
                          amsgrad ? vmax_ref.data() : nullptr, n, s);
        SCOPED_TRACE(testing::Message() << "n=" << n << " variant=" << variant
                                        << " step=" << step);
        ExpectBitwiseEqual(p, p_ref, "param");
        ExpectBitwiseEqual(m, m_ref, "exp_avg");
        ExpectBitwiseEqual(v, v_ref, "exp_avg_sq");
        ExpectBitwiseEqual(vmax, vmax_ref, "max_exp_avg_sq");
      }
    }
  }
}

TEST(AdamStepTest, AmsgradKeepsTheRunningMaximumAndPropagatesNaN) {
  std::vector<float> p(3, 1.0f), m(3, 0.0f), v(3, 0.0f);
  std::vector<float> vmax = {0.5f, 0.0f, std::nanf("")};
  const std::vector<float> g = {0.1f, 2.0f, 0.1f};
  AdamStep(p.data(), g.data(), m.data(), v.data(), vmax.data(), 3,
           MakeAdamScalars(0.1, 0.9, 0.999, 1e-8, 0, false, 1,
                           /*amsgrad=*/true));
  EXPECT_EQ(vmax[0], 0.5f);   // larger than the new exp_avg_sq
  EXPECT_EQ(vmax[1], v[1]);   // the new exp_avg_sq is larger
  EXPECT_TRUE(std::isnan(vmax[2]));
  EXPECT_TRUE(std::isnan(p[2]));
}

TEST(AdagradStepTest, VectorisedMatchesReferenceForEveryVariant) {
  std::mt19937 rng(3);
  for (int64_t n : kSizes) {
    for (double wd : {0.0, 0.05}) {
      for (int64_t step : {1, 2, 50}) {
        const AdagradScalars s = MakeAdagradScalars(0.01, 0.1, wd, 1e-10, step);
        std::vector<float> p = RandomVector(rng, n, -2, 2);
        const std::vector<float> g = RandomVector(rng, n, -1, 1);
        std::vector<float> sum = RandomVector(rng, n, 0, 0.5f);
        std::vector<float> p_ref = p, sum_ref = sum;
        AdagradStep(p.data(), g.data(), sum.data(), n, s);
        AdagradStepReference(p_ref.data(), g.data(), sum_ref.data(), n, s);
        SCOPED_TRACE(testing::Message() << "n=" << n << " wd=" << wd
                                        << " step=" << step);
        ExpectBitwiseEqual(p, p_ref, "param");
        ExpectBitwiseEqual(sum, sum_ref, "sum");
      }
    }
  }
}

TEST(AdagradStepTest, ScalarsFollowTorchHostArithmetic) {
  // clr = lr / (1 + (step - 1) * lr_decay), in double.
  EXPECT_EQ(MakeAdagradScalars(0.01, 0.1, 0, 1e-10, 4).neg_clr,
            static_cast<float>(-(0.01 / (1 + 3 * 0.1))));
  EXPECT_EQ(MakeAdagradScalars(0.01, 0.0, 0, 1e-10, 7).neg_clr,
            static_cast<float>(-0.01));
}

TEST(RmspropStepTest, VectorisedMatchesReferenceForEveryVariant) {
  std::mt19937 rng(4);
  for (int64_t n : kSizes) {
    for (int variant = 0; variant < 8; ++variant) {
      const double wd = (variant & 1) ? 0.01 : 0.0;
      const bool centered = variant & 2;
      const double momentum = (variant & 4) ? 0.9 : 0.0;
      const RmspropScalars s =
          MakeRmspropScalars(0.01, 0.99, 1e-8, wd, momentum, centered);
      std::vector<float> p = RandomVector(rng, n, -2, 2);
      const std::vector<float> g = RandomVector(rng, n, -1, 1);
      std::vector<float> sq = RandomVector(rng, n, 0.01f, 0.5f);
      std::vector<float> buf = RandomVector(rng, n, -0.1f, 0.1f);
      std::vector<float> ga = RandomVector(rng, n, -0.05f, 0.05f);
      std::vector<float> p_ref = p, sq_ref = sq, buf_ref = buf, ga_ref = ga;
      RmspropStep(p.data(), g.data(), sq.data(),
                  momentum != 0 ? buf.data() : nullptr,
                  centered ? ga.data() : nullptr, n, s);
      RmspropStepReference(p_ref.data(), g.data(), sq_ref.data(),
                           momentum != 0 ? buf_ref.data() : nullptr,
                           centered ? ga_ref.data() : nullptr, n, s);
      SCOPED_TRACE(testing::Message() << "n=" << n << " variant=" << variant);
      ExpectBitwiseEqual(p, p_ref, "param");
      ExpectBitwiseEqual(sq, sq_ref, "square_avg");
      ExpectBitwiseEqual(buf, buf_ref, "momentum_buffer");
      ExpectBitwiseEqual(ga, ga_ref, "grad_avg");
    }
  }
}

TEST(LionStepTest, VectorisedMatchesReferenceForEveryVariant) {
  std::mt19937 rng(5);
  for (int64_t n : kSizes) {
    for (double wd : {0.0, 0.5}) {
      const LionScalars s = MakeLionScalars(1e-3, 0.9, 0.99, wd);
      std::vector<float> p = RandomVector(rng, n, -2, 2);
      std::vector<float> g = RandomVector(rng, n, -1, 1);
      if (n > 2) g[1] = 0.0f;  // sign(0) = 0 with m = 0 below
      std::vector<float> m = RandomVector(rng, n, -0.1f, 0.1f);
      if (n > 2) m[1] = 0.0f;
      std::vector<float> p_ref = p, m_ref = m;
      LionStep(p.data(), g.data(), m.data(), n, s);
      LionStepReference(p_ref.data(), g.data(), m_ref.data(), n, s);
      SCOPED_TRACE(testing::Message() << "n=" << n << " wd=" << wd);
      ExpectBitwiseEqual(p, p_ref, "param");
      ExpectBitwiseEqual(m, m_ref, "exp_avg");
    }
  }
}

TEST(LionStepTest, MovesEachParameterByLrTimesTheSign) {
  // Lion's update is lr * sign(beta1 * m + (1 - beta1) * g), after the
  // decoupled decay; sign(0) and sign(NaN) are 0 as torch.sign's.
  std::vector<float> p = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<float> g = {3.0f, -2.0f, 0.0f, std::nanf("")};
  std::vector<float> m = {-0.1f, 0.0f, 0.0f, 0.0f};
  LionStep(p.data(), g.data(), m.data(), 4,
           MakeLionScalars(0.125, 0.9, 0.99, 0.0));
  EXPECT_EQ(p[0], 1.0f - 0.125f);  // c = 0.9 * -0.1 + 0.1 * 3 > 0
  EXPECT_EQ(p[1], 1.0f + 0.125f);  // c = 0.1 * -2 < 0
  EXPECT_EQ(p[2], 1.0f);
  EXPECT_EQ(p[3], 1.0f);
  EXPECT_FLOAT_EQ(m[1], 0.01f * -2.0f);
  EXPECT_TRUE(std::isnan(m[3]));
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
  AdamStep(p.data(), g.data(), m.data(), v.data(), nullptr, 3,
           MakeAdamScalars(0.1, 0.9, 0.999, 1e-8, 0, false, 1));
  EXPECT_NEAR(p[0], -0.1f, 1e-6);
  EXPECT_NEAR(p[1], 1.1f, 1e-6);
  EXPECT_NEAR(p[2], -1.1f, 1e-5);
}

}  // namespace
}  // namespace pshard::worker::cpu
