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

}  // namespace simd
