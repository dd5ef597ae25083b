// int8 x int8 matrix-vector products for the narrowest passes (1-4 rows): y = x W^T, W int8 per output
// channel, x quantised per call to 7-bit unsigned (engine/quant.py's W8A8Linear says why 7 bits).
//
// Why: PyTorch's quantized::linear_dynamic (FBGEMM) takes ~60 us for a 1-row call on a 1 MB matrix
// that DRAM streams in ~30 us (AMD EPYC with AVX512-BF16, 2026-12-06: the 121 linears of a 1-token
// pass 7-8.5 ms against a 3.7 ms read). Here a row of W is read once for all the rows of x and
// multiplied with AVX512-VNNI (vpdpbusd), AVX-VNNI (vpdpbusd, 256-bit) or AVX2 (vpmaddubsw), chosen when the
// program runs.
//
// Numerics as FBGEMM's dynamic linear with reduce_range: the same quantisation parameters
// (PyTorch's ChooseQuantizationParams), exact int32 sums, then (acc - zp * rowsum) * (sx * sw) + b.
#include "int8_gemv.h"

#include "clones.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define VA_X86_KERNELS 1
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace gemv {

namespace {

#ifdef VA_X86_KERNELS  // elsewhere (aarch64) detect() finds none, and PyTorch's int8 kernel runs
// One output row at a time. Measured against 4 (and 2 above 4 rows of x) at a time with one reduction
// for 4 sums: whole passes 1.2-1.5x slower at 1-4 tokens (AMD EPYC, 2026-12-06, interleaved).
template <int M>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void rows_vnni(const uint8_t* xq, int64_t k, const int8_t* w,
                                                                      int64_t n0, int64_t n1, int64_t ld, int32_t* acc) {
  const int64_t full = k / 64 * 64;
  const __mmask64 tail = full == k ? 0 : (~0ULL >> (64 - (k - full)));
  for (int64_t j = n0; j < n1; ++j) {
    const int8_t* wr = w + j * k;
    __m512i a[M];
    for (int r = 0; r < M; ++r) a[r] = _mm512_setzero_si512();
    for (int64_t c = 0; c < full; c += 64) {
      const __m512i wv = _mm512_loadu_si512(wr + c);
      for (int r = 0; r < M; ++r) a[r] = _mm512_dpbusd_epi32(a[r], _mm512_loadu_si512(xq + r * k + c), wv);
    }
    if (tail) {
      const __m512i wv = _mm512_maskz_loadu_epi8(tail, wr + full);
      for (int r = 0; r < M; ++r) a[r] = _mm512_dpbusd_epi32(a[r], _mm512_maskz_loadu_epi8(tail, xq + r * k + full), wv);
    }
    for (int r = 0; r < M; ++r) acc[r * ld + (j - n0)] = _mm512_reduce_add_epi32(a[r]);
  }
}

// the 8 int32 lanes of a 256-bit register, added
__attribute__((target("avx2"), always_inline)) inline int32_t sum8(__m256i a) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// u7 x s8 pairs sum to at most 2 * 127 * 127 < 2^15: vpmaddubsw cannot saturate (the reason for 7 bits)
template <int M>
__attribute__((target("avx2,fma"))) void rows_avx2(const uint8_t* xq, int64_t k, const int8_t* w, int64_t n0,
                                                   int64_t n1, int64_t ld, int32_t* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t j = n0; j < n1; ++j) {
    const int8_t* wr = w + j * k;
    __m256i a[M];
    for (int r = 0; r < M; ++r) a[r] = _mm256_setzero_si256();
    for (int64_t c = 0; c < k; c += 32) {  // k % 32 == 0 (supported() checks)
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + c));
      for (int r = 0; r < M; ++r) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + r * k + c));
        a[r] = _mm256_add_epi32(a[r], _mm256_madd_epi16(_mm256_maddubs_epi16(xv, wv), ones));
      }
    }
    for (int r = 0; r < M; ++r) acc[r * ld + (j - n0)] = sum8(a[r]);
  }
}

// The same products with AVX-VNNI (vpdpbusd on 256-bit registers, VEX-coded: recent Intel laptop CPUs
// have it without AVX512): four u7 x s8 pairs summed into int32 in one instruction, where AVX2 takes three.
template <int M>
__attribute__((target("avx2,fma,avxvnni"))) void rows_avx_vnni(const uint8_t* xq, int64_t k, const int8_t* w,
                                                              int64_t n0, int64_t n1, int64_t ld, int32_t* acc) {
  for (int64_t j = n0; j < n1; ++j) {
    const int8_t* wr = w + j * k;
    __m256i a[M];
    for (int r = 0; r < M; ++r) a[r] = _mm256_setzero_si256();
    for (int64_t c = 0; c < k; c += 32) {  // k % 32 == 0 (supported() checks)
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + c));
      for (int r = 0; r < M; ++r)
        a[r] = _mm256_dpbusd_avx_epi32(a[r], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + r * k + c)), wv);
    }
    for (int r = 0; r < M; ++r) acc[r * ld + (j - n0)] = sum8(a[r]);
  }
}

#endif  // VA_X86_KERNELS

using RowsFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, int64_t, int32_t*);

RowsFn pick([[maybe_unused]] Isa isa, [[maybe_unused]] int64_t m) {
#define VA_ROWS(fn) return m == 1 ? fn<1> : m == 2 ? fn<2> : m == 3 ? fn<3> : m == 4 ? fn<4> : nullptr;
  static_assert(kMaxRows == 4, "one kernel per row count");
#ifdef VA_X86_KERNELS
  if (isa == Isa::avx512_vnni) VA_ROWS(rows_vnni)
  if (isa == Isa::avx_vnni) VA_ROWS(rows_avx_vnni)
  if (isa == Isa::avx2) VA_ROWS(rows_avx2)
#endif
#undef VA_ROWS
  return nullptr;
}

// lo = min(lo, x...), hi = max(hi, x...): the same result in any order
VA_CLONES void min_max(const float* x, int64_t count, float& lo, float& hi) {
  simd::v16 vlo = simd::v16{} + lo, vhi = simd::v16{} + hi;
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const simd::v16 v = simd::load16(x + i);
    vlo = simd::where_lt(v, vlo, v, vlo);
    vhi = simd::where_lt(vhi, v, v, vhi);
  }
  for (int l = 0; l < 16; ++l) {
    lo = std::min(lo, vlo[l]);
    hi = std::max(hi, vhi[l]);
  }
  for (; i < count; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
}

// xq = clamp(nearbyint(x * inv + zp), 0, 255). No fused multiply-add, so that every lane rounds as the
// scalar tail does. |x * inv + zp| < 2^22 (x lies in the range the scale was taken from), so
// adding and taking away 1.5 * 2^23 rounds to the nearest integer, ties to even, as nearbyint does.
__attribute__((optimize("fp-contract=off"))) VA_CLONES void to_u8(const float* x, int64_t count, float inv, float zp,
                                                                  uint8_t* xq) {
  const float magic = 12582912.0f;
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    simd::v16 v = simd::load16(x + i) * inv + zp;
    v = (v + magic) - magic;
    v = simd::where_lt(v, simd::v16{}, simd::v16{}, v);
    v = simd::where_lt(simd::v16{} + 255.0f, v, simd::v16{} + 255.0f, v);
    const simd::i16 n = __builtin_convertvector(v, simd::i16);
    for (int l = 0; l < 16; ++l) xq[i + l] = static_cast<uint8_t>(n[l]);
  }
  for (; i < count; ++i) {
    const float v = std::nearbyint(x[i] * inv + zp);
    xq[i] = static_cast<uint8_t>(std::min(std::max(v, 0.0f), 255.0f));
  }
}

}  // namespace

Isa detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  // VOICE_AGENT_CPU_ISA caps the instruction set, as engine/cpu_isa.py does for the Python side
  const char* env = std::getenv("VOICE_AGENT_CPU_ISA");
  const std::string cap = env ? env : "auto";
  if (cap == "baseline") return Isa::none;
  __builtin_cpu_init();
  const bool uncapped = cap != "avx2" && cap != "avx512";
  if (cap != "avx2" && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"))
    return Isa::avx512_vnni;
  if (uncapped && __builtin_cpu_supports("avxvnni") && __builtin_cpu_supports("avx2")) return Isa::avx_vnni;
  if (__builtin_cpu_supports("avx2")) return Isa::avx2;
#endif
  return Isa::none;
}

Isa named(const std::string& name) {
  static const Isa best = detect();
  if (name == "auto") return best;
  if (name == "avx512_vnni") return best == Isa::avx512_vnni ? best : Isa::none;
  if (name == "avx_vnni") return best == Isa::avx_vnni ? best : Isa::none;
  if (name == "avx2") return best != Isa::none ? Isa::avx2 : Isa::none;  // every CPU with VNNI has AVX2
  return Isa::none;
}

const char* name_of(Isa isa) {
  switch (isa) {
    case Isa::avx512_vnni: return "avx512_vnni";
    case Isa::avx_vnni: return "avx_vnni";
    case Isa::avx2: return "avx2";
    default: return "none";
  }
}

bool supported(Isa isa, int64_t k) {
  return isa == Isa::avx512_vnni || ((isa == Isa::avx2 || isa == Isa::avx_vnni) && k % 32 == 0);
}

Quant quantize(const float* x, int64_t count, uint8_t* xq) {
  float lo = 0.0f, hi = 0.0f;  // the range always holds 0
  min_max(x, count, lo, hi);
  // PyTorch's ChooseQuantizationParams for quint8 with reduce_range: qmin 0, qmax 127
  const double qmin = 0, qmax = 127;
  double scale = (static_cast<double>(hi) - lo) / (qmax - qmin);
  if (static_cast<float>(scale) == 0.0f || std::isinf(1.0f / static_cast<float>(scale))) scale = 0.1;
  const double zp_min = qmin - lo / scale, zp_max = qmax - hi / scale;
  const double err_min = std::abs(qmin) - std::abs(lo / scale), err_max = std::abs(qmax) - std::abs(hi / scale);
  const double zp0 = err_min < err_max ? zp_min : zp_max;
  const int32_t zp = zp0 < qmin ? 0 : zp0 > qmax ? 127 : static_cast<int32_t>(std::nearbyint(zp0));
  const float fscale = static_cast<float>(scale);
  to_u8(x, count, 1.0f / fscale, static_cast<float>(zp), xq);
  return {fscale, zp};
}

void rows(Isa isa, const uint8_t* xq, int64_t m, int64_t k, const int8_t* w, int64_t n0, int64_t n1, int64_t ld,
          int32_t* acc) {
  pick(isa, m)(xq, k, w, n0, n1, ld, acc);
}

void product(const Matrix& mat, const uint8_t* xq, int64_t m, Quant q, float* y, int64_t n0, int64_t n1) {
  constexpr int64_t kBlock = 64;  // output rows a stack accumulator holds
  int32_t acc[kMaxRows * kBlock];
  const int64_t n = mat.n;
  for (int64_t b0 = n0; b0 < n1; b0 += kBlock) {
    const int64_t b1 = std::min(n1, b0 + kBlock);
    rows(mat.isa, xq, m, mat.k, mat.w, b0, b1, kBlock, acc);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = b0; j < b1; ++j) {  // (acc - zp * rowsum) * (scale * scales) + bias
        const float v =
            static_cast<float>(acc[r * kBlock + (j - b0)] - q.zero_point * mat.rowsum[j]) * (q.scale * mat.scales[j]);
        y[r * n + j] = mat.bias ? v + mat.bias[j] : v;
      }
  }
}

}  // namespace gemv
