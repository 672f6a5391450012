// The synthetic workload's pseudo-random values, callable on host and device:
// a port of worker/workload/random.h (Mix64, StreamKey, FillUniformSymmetric)
// so that the GPU synthetic workload produces exactly the CPU one's parameters
// and gradients, element for element (optimizer_plan_test checks the bits
// against random.h). Counter-based: any element is a pure function of
// (key, index), so every CUDA thread computes its own.
#ifndef PSHARD_WORKER_GPU_SYNTHETIC_H_
#define PSHARD_WORKER_GPU_SYNTHETIC_H_

#include <cstdint>

#if defined(__CUDACC__)
#define PSHARD_HOST_DEVICE __host__ __device__
#else
#define PSHARD_HOST_DEVICE
#endif

namespace pshard::worker::gpu {

// Stream tags of worker/workload/synthetic_workload.cc.
inline constexpr uint64_t kSyntheticTagInit =
    0x73796e2d696e6974ULL;  // "syn-init"
inline constexpr uint64_t kSyntheticTagGrad =
    0x73796e2d67726164ULL;  // "syn-grad"

// SplitMix64's finaliser (random.h's Mix64).
PSHARD_HOST_DEVICE inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// random.h's StreamKey(seed, {a, b, c, d}) for up to four parts.
inline uint64_t StreamKey4(uint64_t seed, int num_parts, uint64_t a,
                           uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  const uint64_t parts[4] = {a, b, c, d};
  uint64_t key = Mix64(seed);
  for (int i = 0; i < num_parts; ++i) key = Mix64(key ^ parts[i]);
  return key;
}

// Key of tensor `tensor`'s initial values, and of its gradient at `step`
// on `rank` (SyntheticWorkload's streams).
inline uint64_t SyntheticInitKey(uint64_t seed, int tensor) {
  return StreamKey4(seed, 2, kSyntheticTagInit, static_cast<uint64_t>(tensor));
}
inline uint64_t SyntheticGradKey(uint64_t seed, int rank, int64_t step,
                                 int tensor) {
  return StreamKey4(seed, 4, kSyntheticTagGrad, static_cast<uint64_t>(rank),
                    static_cast<uint64_t>(step), static_cast<uint64_t>(tensor));
}

// Element `index` of FillUniformSymmetric(key, out, n): uniform in [-1, 1),
// exact in fp32 (a 24-bit integer times 2^-23).
PSHARD_HOST_DEVICE inline float SymmetricUniformAt(uint64_t key,
                                                   int64_t index) {
  // FillUniformSymmetric keys each block of 2^31 elements separately.
  const int64_t start = (index >> 31) << 31;
  const uint64_t block_key =
      start == 0 ? key : Mix64(key + static_cast<uint64_t>(start));
  const uint32_t lo = static_cast<uint32_t>(block_key);
  const uint32_t hi = static_cast<uint32_t>(block_key >> 32);
  uint32_t x = static_cast<uint32_t>(index - start) * 0x9e3779b9u + lo;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  x ^= hi;
  return static_cast<float>(static_cast<int32_t>(x) >> 8) * 0x1.0p-23f;
}

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_SYNTHETIC_H_
