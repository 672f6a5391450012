// Counter-based pseudo-random numbers for the built-in workloads.
//
// Every value is a pure function of (key, index): no generator state, so any
// element of any tensor on any rank can be produced independently, in any
// order, in parallel, and identically on every machine. Keys are derived from
// the job seed and a purpose tag with SplitMix64, so streams do not collide.
#ifndef PSHARD_WORKER_WORKLOAD_RANDOM_H_
#define PSHARD_WORKER_WORKLOAD_RANDOM_H_

#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace pshard::worker {

// SplitMix64's finaliser: a bijective 64-bit mixer.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A key for one stream, from the seed and the coordinates that name it
// (purpose tag, rank, step, tensor index, ...).
inline uint64_t StreamKey(uint64_t seed, std::initializer_list<uint64_t> parts) {
  uint64_t key = Mix64(seed);
  for (uint64_t part : parts) key = Mix64(key ^ part);
  return key;
}

// Uniform in [0, 1) with 24 random bits (every value is an exact float).
inline float UniformAt(uint64_t key, uint64_t index) {
  return static_cast<float>(Mix64(key + index) >> 40) * 0x1.0p-24f;
}

// Uniform in [lo, hi).
inline float UniformAt(uint64_t key, uint64_t index, float lo, float hi) {
  return lo + (hi - lo) * UniformAt(key, index);
}

// Standard normals by Box-Muller in float: the pair (2j, 2j+1) comes from one
// hash of (key, j), element 2j from the cosine branch and 2j+1 from the sine
// branch. u1 has 24 bits, so tails are cut at ~5.8 sigma.
inline void NormalPairAt(uint64_t key, uint64_t pair, float* c, float* s) {
  const uint64_t h = Mix64(key + pair);
  // u1 in (0, 1], u2 in [0, 1), 24 bits each: exact floats.
  const float u1 = static_cast<float>((h >> 40) + 1) * 0x1.0p-24f;
  const float u2 = static_cast<float>(h & 0xffffffULL) * 0x1.0p-24f;
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float theta = 6.2831853071795865f * u2;
  *c = r * std::cos(theta);
  *s = r * std::sin(theta);
}

// Element `index` of the normal stream `key`: bit-identical to
// FillNormal(key, out, n)[index] (other implementations of a workload, such
// as the GPU mlp, draw element by element and must agree).
inline float NormalAt(uint64_t key, uint64_t index) {
  float c, s;
  NormalPairAt(key, index >> 1, &c, &s);
  return (index & 1) ? s : c;
}

// Fills out[0, n) with NormalAt(key, 0..n-1), computing each pair once:
// about 4x cheaper per element than a double-precision Box-Muller.
inline void FillNormal(uint64_t key, float* out, int64_t n) {
  for (int64_t j = 0; 2 * j < n; ++j) {
    float c, s;
    NormalPairAt(key, static_cast<uint64_t>(j), &c, &s);
    out[2 * j] = c;
    if (2 * j + 1 < n) out[2 * j + 1] = s;
  }
}

// Fills out[0, n) with uniform values in [-1, 1) from a 32-bit counter hash
// (lowbias32 by Chris Wellons) that GCC vectorises: cheap enough to generate
// gigabytes of synthetic gradients per second. `key` selects the stream.
inline void FillUniformSymmetric(uint64_t key, float* __restrict out,
                                 int64_t n) {
  // The 32-bit counter covers blocks of 2^31 elements; each block gets its
  // own key so long tensors never repeat.
  constexpr int64_t kBlock = int64_t{1} << 31;
  for (int64_t start = 0; start < n; start += kBlock) {
    const uint64_t block_key = start == 0 ? key : Mix64(key + start);
    const uint32_t lo = static_cast<uint32_t>(block_key);
    const uint32_t hi = static_cast<uint32_t>(block_key >> 32);
    const int64_t len = n - start < kBlock ? n - start : kBlock;
    float* __restrict block = out + start;
    for (int64_t i = 0; i < len; ++i) {
      uint32_t x = static_cast<uint32_t>(i) * 0x9e3779b9u + lo;
      x ^= x >> 16;
      x *= 0x7feb352du;
      x ^= x >> 15;
      x *= 0x846ca68bu;
      x ^= x >> 16;
      x ^= hi;
      block[i] = static_cast<float>(static_cast<int32_t>(x) >> 8) * 0x1.0p-23f;
    }
  }
}

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_RANDOM_H_
