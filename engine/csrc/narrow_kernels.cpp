// Hand loops for a narrow pass (the 1-8 rows of a decode's verify pass, on a w8a8 model's fp32
// stream): RMSNorm, RoPE with the cache write, attention over the cache, SiLU(gate) * up.
//
// Why: at one token the arithmetic of these is a few microseconds, yet as ATen ops they cost a
// 1-token pass ~40% of its time (AMD EPYC with AVX512-BF16, 2026-12-06: SDPA's flash kernel
// 80 us a call, rms_norm 21 us, ~20 more small ops a layer at 1-3 us). Only the four linears of a
// layer stay in ATen (they stream the weights, which is the pass's real cost).
//
// Numerics: the same formulas in fp32 as engine/model.py; RoPE, the cache's K/V and the residual adds
// are bit-identical to it (RoPE is compiled without fused multiply-adds). The RMSNorm
// and attention sums run in another order, and exp is a polynomial (<= 2 ulp), so the hidden states
// differ from the Python layers' by rounding (tests/test_native.py bounds it). On a bf16 cache the
// softmax weights are rounded to bf16 and normalised after the weighted sum, as SDPA's flash kernel does.
//
// Each hot loop is compiled for AVX512, AVX2 and baseline x86-64 (GCC target_clones picks at load
// time), so one build serves every CPU of ours.
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "narrow_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VA_CLONES
#endif
// Helpers are inlined into each clone, so they are compiled for its instruction set too.
#define VA_INLINE __attribute__((always_inline)) inline

namespace narrow {

namespace {

inline float bf16_to_float(c10::BFloat16 v) { return static_cast<float>(v); }
inline float bf16_to_float(float v) { return v; }

template <typename T>
inline T from_float(float v) {
  return static_cast<T>(v);  // c10::BFloat16: round to nearest even, as ATen's .to(bfloat16)
}

VA_CLONES float sum_squares(const float* x, int64_t d) {
  float part[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= d; j += 16)
    for (int l = 0; l < 16; ++l) part[l] += x[j + l] * x[j + l];
  float s = 0;
  for (; j < d; ++j) s += x[j] * x[j];
  for (int l = 0; l < 16; ++l) s += part[l];
  return s;
}

VA_CLONES void scale_weight(const float* __restrict x, float rstd, const float* __restrict w, float* __restrict y,
                            int64_t d) {
  for (int64_t j = 0; j < d; ++j) y[j] = (x[j] * rstd) * w[j];
}

// 16 floats: one AVX512 register, two AVX2 ones, four SSE ones, as the clone compiles it.
typedef float v16 __attribute__((vector_size(64)));

VA_INLINE v16 load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

VA_INLINE void store16(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }

typedef int32_t i16 __attribute__((vector_size(64)));

// exp(x) on 16 lanes, for softmax after the max is taken and SiLU's -g: Cephes' expf polynomial
// (<= 2 ulp), rounding n = x / ln 2 with the 1.5 * 2^23 trick so that every step is a vector op.
VA_INLINE v16 exp16(v16 x) {
  const v16 lo = v16{} - 87.0f, hi = v16{} + 88.0f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const float magic = 12582912.0f;
  const v16 t = x * 1.44269504088896341f + magic;
  const v16 n = t - magic;
  v16 r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  v16 p = v16{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const i16 e = (reinterpret_cast<const i16&>(t) - 0x4B400000) << 23;  // n, from t's low mantissa bits
  const i16 bits = reinterpret_cast<const i16&>(p) + e;
  return reinterpret_cast<const v16&>(bits);
}


// Two vectors of partial sums (groups of w lanes, one group per key) -> one with groups of w/2 lanes:
// the lanes named by `lo` plus those named by `hi` (indices 16-31 pick from b).
VA_INLINE v16 fold(v16 a, v16 b, i16 lo, i16 hi) { return __builtin_shuffle(a, b, lo) + __builtin_shuffle(a, b, hi); }

typedef uint16_t h16 __attribute__((vector_size(32)));
typedef uint32_t w16 __attribute__((vector_size(64)));

// 16 bf16 -> 16 fp32 (exact: a bf16 is the top half of an fp32)
VA_INLINE v16 load16(const c10::BFloat16* p) {
  h16 h;
  std::memcpy(&h, p, sizeof h);
  const w16 w = __builtin_convertvector(h, w16) << 16;
  v16 v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}

// The scores q . k[j] of 16 keys (k: 16 rows of 16 * HC, the cache's dtype or fp32). Each key's
// products stay a 16-lane vector, and a shuffle tree sums the sixteen vectors into one vector of
// sixteen scores (~2 instructions a key, where a horizontal sum per key would take ~8).
template <int HC, typename KV>
VA_INLINE v16 score_block(const v16 (&q)[HC], const KV* __restrict k) {
  const i16 lo1 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  const i16 lo2 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
  const i16 lo3 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
  const i16 lo4 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  v16 a[16];
  for (int j = 0; j < 16; ++j) {
    const KV* kr = k + j * HC * 16;
    v16 even = q[0] * load16(kr), odd = q[1] * load16(kr + 16);  // two chains: half the latency
    for (int c = 2; c < HC; c += 2) {
      even += q[c] * load16(kr + c * 16);
      odd += q[c + 1] * load16(kr + c * 16 + 16);
    }
    a[j] = even + odd;
  }
  v16 b[8], c[4], d[2];
  for (int j = 0; j < 8; ++j) b[j] = fold(a[2 * j], a[2 * j + 1], lo1, lo1 + 8);
  for (int j = 0; j < 4; ++j) c[j] = fold(b[2 * j], b[2 * j + 1], lo2, lo2 + 4);
  for (int j = 0; j < 2; ++j) d[j] = fold(c[2 * j], c[2 * j + 1], lo3, lo3 + 2);
  return fold(d[0], d[1], lo4, lo4 + 1);
}

// scores[s] = q . k[s] * scale for one query row over the span's keys, read in the cache's dtype
template <int HC, typename KV>
VA_INLINE void scores_row(const float* __restrict q_row, const KV* __restrict k, int64_t span, float scale,
                          float* __restrict out) {
  v16 q[HC];
  for (int c = 0; c < HC; ++c) q[c] = load16(q_row + c * 16);
  int64_t s0 = 0;
  for (; s0 + 16 <= span; s0 += 16) store16(out + s0, score_block<HC>(q, k + s0 * HC * 16) * scale);
  if (s0 < span) {  // the last keys, zero-padded to a block (the cache may end right after the span)
    float tail[16 * HC * 16] = {};
    for (int64_t i = 0; i < (span - s0) * HC * 16; ++i) tail[i] = static_cast<float>(k[s0 * HC * 16 + i]);
    store16(out + s0, score_block<HC>(q, static_cast<const float*>(tail)) * scale);
  }
}

// out[r] = sum over s of p[r][s] * v[s] for R rows (v: [span, 16 * HC]): each key's value row is
// read once for all R rows, into R * HC independent accumulators.
template <int R, int HC, typename KV>
VA_INLINE void values_rows(const float* __restrict p, const KV* __restrict v, int64_t span, int64_t span_pad,
                           float* __restrict out) {
  v16 acc[R][HC] = {};
  for (int64_t s = 0; s < span; ++s) {
    const KV* vr = v + s * HC * 16;
    for (int c = 0; c < HC; ++c) {
      const v16 vc = load16(vr + c * 16);
      for (int r = 0; r < R; ++r) acc[r][c] += p[r * span_pad + s] * vc;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < HC; ++c) store16(out + r * HC * 16 + c * 16, acc[r][c]);
}

// fp32 -> the nearest bf16 (ties to even, as ATen's .to(bfloat16)) -> fp32, on 16 finite lanes
VA_INLINE v16 round_bf16(v16 x) {
  i16 b;
  std::memcpy(&b, &x, sizeof b);
  b = (b + 0x7FFF + ((b >> 16) & 1)) & static_cast<int32_t>(0xFFFF0000u);
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// p[s] = exp(p[s] - shift) where visible (and s < span), else 0; returns their sum. With `round`, the
// p kept are rounded to bf16 after the sum is taken: what SDPA's flash kernel multiplies a bf16 V by.
VA_INLINE float exp_shifted(float* __restrict p, float shift, const bool* __restrict visible, int64_t span,
                            int64_t span_pad, bool round) {
  v16 total = {};
  for (int64_t j = 0; j < span_pad; j += 16) {
    v16 e = exp16(load16(p + j) - shift);
    for (int l = 0; l < 16; ++l)
      if (j + l >= span || (visible && !visible[j + l])) e[l] = 0.0f;
    total += e;
    store16(p + j, round ? round_bf16(e) : e);
  }
  float sum = 0;
  for (int l = 0; l < 16; ++l) sum += total[l];
  return sum;
}

// Attention of `rows` query rows (q [rows, 16 * HC]; row i is token i / rep) over one KV head's
// span (k, v: [span, 16 * HC] in the cache): softmax(q K^T * scale) V into out [rows, 16 * HC].
// `visible` [tokens, mask_stride] or null; scores: [rows, span_pad] scratch.
template <int HC, typename KV>
VA_INLINE void attend_rows(const float* __restrict q, const KV* __restrict k, const KV* __restrict v, int64_t rows,
                           int64_t rep, int64_t span, float scale, const bool* visible, int64_t mask_stride,
                           float* __restrict scores, float* __restrict out) {
  const int64_t span_pad = (span + 15) / 16 * 16, hd = 16 * HC;
  float inv[kMaxQueryRows];  // 1 / softmax sum per row
  for (int64_t r = 0; r < rows; ++r) scores_row<HC>(q + r * hd, k, span, scale, scores + r * span_pad);
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = scores + r * span_pad;
    const bool* m = visible ? visible + (r / rep) * mask_stride : nullptr;
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t s = 0; s < span; ++s)
      if (!m || m[s]) best = std::max(best, sr[s]);
    if (best == -std::numeric_limits<float>::infinity()) {  // no key visible: zeros, not NaN
      std::fill(sr, sr + span_pad, 0.0f);
      inv[r] = 0.0f;
      continue;
    }
    // normalised after the weighted sum, as SDPA's flash kernel does
    inv[r] = 1.0f / exp_shifted(sr, best, m, span, span_pad, std::is_same<KV, c10::BFloat16>::value);
  }
  int64_t r0 = 0;
  for (; r0 + 3 <= rows; r0 += 3) values_rows<3, HC>(scores + r0 * span_pad, v, span, span_pad, out + r0 * hd);
  for (; r0 < rows; ++r0) values_rows<1, HC>(scores + r0 * span_pad, v, span, span_pad, out + r0 * hd);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < hd; ++j) out[r * hd + j] *= inv[r];
}

// One clone set per cache dtype (target_clones wants plain functions); head_dim 64 or 128.
VA_CLONES void attend_rows_bf16(const float* q, const c10::BFloat16* k, const c10::BFloat16* v, int64_t hd,
                                int64_t rows, int64_t rep, int64_t span, float scale, const bool* visible,
                                int64_t mask_stride, float* scores, float* out) {
  if (hd == 64)
    attend_rows<4>(q, k, v, rows, rep, span, scale, visible, mask_stride, scores, out);
  else
    attend_rows<8>(q, k, v, rows, rep, span, scale, visible, mask_stride, scores, out);
}

VA_CLONES void attend_rows_f32(const float* q, const float* k, const float* v, int64_t hd, int64_t rows, int64_t rep,
                               int64_t span, float scale, const bool* visible, int64_t mask_stride, float* scores,
                               float* out) {
  if (hd == 64)
    attend_rows<4>(q, k, v, rows, rep, span, scale, visible, mask_stride, scores, out);
  else
    attend_rows<8>(q, k, v, rows, rep, span, scale, visible, mask_stride, scores, out);
}

inline void attend_rows_any(const float* q, const c10::BFloat16* k, const c10::BFloat16* v, int64_t hd, int64_t rows,
                            int64_t rep, int64_t span, float scale, const bool* visible, int64_t mask_stride,
                            float* scores, float* out) {
  attend_rows_bf16(q, k, v, hd, rows, rep, span, scale, visible, mask_stride, scores, out);
}

inline void attend_rows_any(const float* q, const float* k, const float* v, int64_t hd, int64_t rows, int64_t rep,
                            int64_t span, float scale, const bool* visible, int64_t mask_stride, float* scores,
                            float* out) {
  attend_rows_f32(q, k, v, hd, rows, rep, span, scale, visible, mask_stride, scores, out);
}

VA_CLONES void silu_mul_row(const float* __restrict g, const float* __restrict u, float* __restrict out, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const v16 gv = load16(g + j);
    store16(out + j, gv / (1.0f + exp16(-gv)) * load16(u + j));
  }
  for (; j < n; ++j) out[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
}

VA_CLONES void add_row(float* __restrict x, const float* __restrict y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] = x[j] + y[j];
}

// One query group (the `rep` query heads of one KV head, each at T positions) over `span` keys.
template <typename KV>
void attend_group(const Pass& p, int64_t b, int64_t g, const float* q, float* y, int layer) {
  const int64_t hd = p.head_dim, span = p.span, rep = p.n_heads / p.n_kv_heads, t_n = p.tokens;
  const int64_t span_pad = (span + 15) / 16 * 16, rows = t_n * rep;
  const size_t base = ((static_cast<size_t>(layer) * p.batch + b) * p.n_kv_heads + g) * p.capacity * hd;
  thread_local std::vector<float> qg, scores, out;  // reused: no allocation a pass
  qg.resize(rows * hd);
  scores.resize(rows * span_pad);
  out.resize(rows * hd);
  for (int64_t t = 0; t < t_n; ++t)
    for (int64_t r = 0; r < rep; ++r)
      std::memcpy(qg.data() + (t * rep + r) * hd, q + ((b * t_n + t) * p.n_heads + g * rep + r) * hd, hd * sizeof(float));
  const bool* visible = p.mask ? p.mask + b * p.mask_rows * span : nullptr;
  attend_rows_any(qg.data(), static_cast<const KV*>(p.k_cache) + base, static_cast<const KV*>(p.v_cache) + base, hd,
                  rows, rep, span, 1.0f / std::sqrt(static_cast<float>(hd)), visible, span, scores.data(), out.data());
  // SDPA on a bf16 cache returns bf16: round as it does, so the o-projection sees the same kind of input
  for (int64_t t = 0; t < t_n; ++t)
    for (int64_t r = 0; r < rep; ++r) {
      const float* src = out.data() + (t * rep + r) * hd;
      float* dst = y + ((b * t_n + t) * p.n_heads + g * rep + r) * hd;
      for (int64_t j = 0; j < hd; ++j) dst[j] = bf16_to_float(from_float<KV>(src[j]));
    }
}

// -ffp-contract=off: each multiply and add rounds as ATen's do, so q, K and V are bit-identical
template <typename KV>
__attribute__((optimize("fp-contract=off"))) void rope_and_write(const Pass& p, const float* qkv, const float* cos, const float* ssin, float* q, int layer) {
  const int64_t hd = p.head_dim, half = hd / 2, nh = p.n_heads, nkv = p.n_kv_heads;
  const int64_t width = (nh + 2 * nkv) * hd;
  KV* kc = static_cast<KV*>(p.k_cache);
  KV* vc = static_cast<KV*>(p.v_cache);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.tokens; ++t) {
      const int64_t row = b * p.tokens + t;
      const float* in = qkv + row * width;
      const float* c = cos + row * hd;
      const float* sn = ssin + row * hd;
      const int64_t slot = p.start >= 0 ? p.start + t : p.slots[row];
      for (int64_t h = 0; h < nh + nkv; ++h) {
        const float* x = in + h * hd;
        KV rot[512];
        for (int64_t j = 0; j < hd; ++j) rot[j] = from_float<KV>(x[j] * c[j] + x[(j + half) % hd] * sn[j]);
        if (h < nh) {
          float* qo = q + (row * nh + h) * hd;
          for (int64_t j = 0; j < hd; ++j) qo[j] = bf16_to_float(rot[j]);
        } else {
          const size_t at = (((static_cast<size_t>(layer) * p.batch + b) * nkv + (h - nh)) * p.capacity + slot) * hd;
          std::memcpy(kc + at, rot, hd * sizeof(KV));
        }
      }
      for (int64_t h = 0; h < nkv; ++h) {
        const float* x = in + (nh + nkv + h) * hd;
        const size_t at = (((static_cast<size_t>(layer) * p.batch + b) * nkv + h) * p.capacity + slot) * hd;
        for (int64_t j = 0; j < hd; ++j) vc[at + j] = from_float<KV>(x[j]);
      }
    }
  }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float rstd = 1.0f / std::sqrt(sum_squares(x + r * d, d) / static_cast<float>(d) + eps);
    scale_weight(x + r * d, rstd, w, y + r * d, d);
  }
}

void rope_write(const Pass& p, const float* qkv, const float* cos, const float* ssin, float* q, int layer) {
  if (p.kv_bf16)
    rope_and_write<c10::BFloat16>(p, qkv, cos, ssin, q, layer);
  else
    rope_and_write<float>(p, qkv, cos, ssin, q, layer);
}

void attend(const Pass& p, const float* q, float* y, int layer, int64_t group_begin, int64_t group_end) {
  for (int64_t i = group_begin; i < group_end; ++i) {
    const int64_t b = i / p.n_kv_heads, g = i % p.n_kv_heads;
    if (p.kv_bf16)
      attend_group<c10::BFloat16>(p, b, g, q, y, layer);
    else
      attend_group<float>(p, b, g, q, y, layer);
  }
}

void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) silu_mul_row(gate_up + r * 2 * n, gate_up + r * 2 * n + n, out + r * n, n);
}

void add(float* x, const float* y, int64_t n) { add_row(x, y, n); }

}  // namespace narrow
