// One build for every CPU of ours: hot loops compiled for AVX512, AVX2 and baseline x86-64 (GCC
// target_clones picks one when the library loads), and the 16-lane float vector they are written in.
#pragma once
#include <cstdint>
#include <cstring>

// VA_CLONES_UP_TO (set by engine/native.py for VOICE_AGENT_CPU_ISA=avx2 / baseline) leaves out the clones
// above that level, so a capped machine runs what an AVX2-only (or pre-AVX2) CPU would.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(VA_CLONES_UP_TO)
#define VA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && VA_CLONES_UP_TO == 3
#define VA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VA_CLONES
#endif
// Helpers are inlined into each clone, so they are compiled for its instruction set too.
#define VA_INLINE __attribute__((always_inline)) inline

namespace simd {

// 16 floats: one AVX512 register, two AVX2 ones, four SSE ones, as the clone compiles it.
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));

VA_INLINE v16 load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

VA_INLINE void store16(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }

// Whether the AVX512 clones run here (GCC picks arch=x86-64-v4 where the CPU has its AVX512 subsets, and
// a capped build has none): some loops are written apart for them and for the AVX2 ones, the same sums.
inline bool avx512_clones() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(VA_CLONES_UP_TO)
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512cd");
  }();
  return yes;
#else
  return false;
#endif
}

// A v16 as two 8-lane halves, the AVX2 register's width.
typedef float v8 __attribute__((vector_size(32)));

VA_INLINE v8 half(v16 v, int h) {
  v8 r;
  std::memcpy(&r, reinterpret_cast<const char*>(&v) + 32 * h, sizeof r);
  return r;
}

VA_INLINE v16 join(v8 lo, v8 hi) {
  v16 r;
  std::memcpy(&r, &lo, sizeof lo);
  std::memcpy(reinterpret_cast<char*>(&r) + 32, &hi, sizeof hi);
  return r;
}

// a < b ? x : y, lane by lane. Taken in 8-lane halves: GCC lowers a 16-lane compare or select to a
// scalar compare and branch per lane in the AVX2 clone (seen in its code for exp16's clamps).
VA_INLINE v16 where_lt(v16 a, v16 b, v16 x, v16 y) {
  const v8 lo = half(a, 0) < half(b, 0) ? half(x, 0) : half(y, 0);
  const v8 hi = half(a, 1) < half(b, 1) ? half(x, 1) : half(y, 1);
  return join(lo, hi);
}

}  // namespace simd
