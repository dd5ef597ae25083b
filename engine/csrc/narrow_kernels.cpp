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

#include "clones.h"
#include "narrow_kernels.h"

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

using simd::i16;
using simd::load16;
using simd::store16;
using simd::v16;

// exp(x) on 16 lanes, for softmax after the max is taken and SiLU's -g: Cephes' expf polynomial
// (<= 2 ulp), rounding n = x / ln 2 with the 1.5 * 2^23 trick so that every step is a vector op.
VA_INLINE v16 exp16(v16 x) {
  const v16 lo = v16{} - 87.0f, hi = v16{} + 88.0f;
  x = simd::where_lt(x, lo, lo, x);
  x = simd::where_lt(hi, x, hi, x);
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

// The scores q[r] . k[j] of R query rows and 16 keys (k: 16 rows of 16 * HC, the cache's dtype or fp32),
// each key's vectors loaded once for the R rows. Each key's products stay a 16-lane vector, and a shuffle
// tree sums a row's sixteen vectors into one vector of sixteen scores (~2 instructions a key, where a
// horizontal sum per key would take ~8); the tree folds as the keys come, so that a row holds at most
// four partial sums, not sixteen (the same pairs, so the same sums, as folding them all at the end).
template <int R, int HC, typename KV>
VA_INLINE void score_block(const v16 (&q)[R][HC], const KV* __restrict k, v16 (&out)[R]) {
  const i16 lo[4] = {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                     {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
                     {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
                     {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}};
  v16 wait[4][R];  // the partial sums waiting for their pair at each level of the tree
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    const KV* kr = k + j * HC * 16;
    v16 kv[HC];
    for (int x = 0; x < HC; ++x) kv[x] = load16(kr + x * 16);
    for (int r = 0; r < R; ++r) {
      v16 even = q[r][0] * kv[0], odd = q[r][1] * kv[1];  // two chains: half the latency
      for (int x = 2; x < HC; x += 2) {
        even += q[r][x] * kv[x];
        odd += q[r][x + 1] * kv[x + 1];
      }
      // level l pairs keys 2^l apart: an even index at a level waits for its odd partner there
      v16 e = even + odd;
      for (int l = 0; l < 4; ++l) {
        if (!((j >> l) & 1)) {
          wait[l][r] = e;
          break;
        }
        e = fold(wait[l][r], e, lo[l], lo[l] + (8 >> l));
        if (l == 3) out[r] = e;
      }
    }
  }
}

// scores[r][s] = q[r] . k[s] * scale for R query rows over keys s0..s1-1 (s0 a multiple of 16), read in
// the cache's dtype; `scores` rows are span_pad apart
template <int R, int HC, typename KV>
VA_INLINE void scores_rows(const float* const* q_rows, const KV* __restrict k, int64_t s0, int64_t s1, float scale,
                           int64_t span_pad, float* __restrict scores) {
  v16 q[R][HC], out[R];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < HC; ++x) q[r][x] = load16(q_rows[r] + x * 16);
  for (; s0 + 16 <= s1; s0 += 16) {
    score_block<R, HC>(q, k + s0 * HC * 16, out);
    for (int r = 0; r < R; ++r) store16(scores + r * span_pad + s0, out[r] * scale);
  }
  if (s0 < s1) {  // the last keys, zero-padded to a block (the cache may end right after the span)
    float tail[16 * HC * 16] = {};
    for (int64_t i = 0; i < (s1 - s0) * HC * 16; ++i) tail[i] = static_cast<float>(k[s0 * HC * 16 + i]);
    score_block<R, HC>(q, static_cast<const float*>(tail), out);
    for (int r = 0; r < R; ++r) store16(scores + r * span_pad + s0, out[r] * scale);
  }
}

// out[r] = sum over s in s0..s1-1 of p[r][s] * v[s] for R rows (v: [span, 16 * HC]): each key's value
// row is read once for all R rows, into R * HC independent accumulators.
// `halves` (the AVX2 clones): the products run on 8-lane halves, each p broadcast once. A float times a
// v16 compiled, in the AVX2 clone, to sixteen scalar stores and a reload per key (store-forwarding stalls:
// 19% of a 1-token pass over a 480-token cache, perf, a capped EPYC, 2026-12-07; 8.7 -> 5.9 ms), while in
// the AVX512 clone the halves made 2-4-token passes ~0.3-1 ms slower. Each lane's sum is the same either way.
template <int R, int HC, bool halves, typename KV>
VA_INLINE void values_rows(const float* __restrict p, const KV* __restrict v, int64_t s0, int64_t s1, int64_t span_pad,
                           float* __restrict out) {
  if constexpr (halves) {
    using simd::v8;
    v8 acc[R][2 * HC] = {};
    for (int64_t s = s0; s < s1; ++s) {
      const KV* vr = v + s * HC * 16;
      v8 ps[R];
      for (int r = 0; r < R; ++r) ps[r] = v8{} + p[r * span_pad + s];
      for (int c = 0; c < HC; ++c) {
        const v16 vc = load16(vr + c * 16);
        const v8 lo = simd::half(vc, 0), hi = simd::half(vc, 1);
        for (int r = 0; r < R; ++r) {
          acc[r][2 * c] += ps[r] * lo;
          acc[r][2 * c + 1] += ps[r] * hi;
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < HC; ++c) store16(out + r * HC * 16 + c * 16, simd::join(acc[r][2 * c], acc[r][2 * c + 1]));
  } else {
    v16 acc[R][HC] = {};
    for (int64_t s = s0; s < s1; ++s) {
      const KV* vr = v + s * HC * 16;
      for (int c = 0; c < HC; ++c) {
        const v16 vc = load16(vr + c * 16);
        for (int r = 0; r < R; ++r) acc[r][c] += p[r * span_pad + s] * vc;
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < HC; ++c) store16(out + r * HC * 16 + c * 16, acc[r][c]);
  }
}

// values_rows for `n` rows, three at a time (each value row read once for the three), then one at a time
template <int HC, bool halves, typename KV>
VA_INLINE void values_all(int64_t n, const float* __restrict scores, const KV* __restrict v, int64_t s0, int64_t s1,
                          int64_t span_pad, float* __restrict part_acc) {
  const int64_t hd = 16 * HC;
  int64_t r0 = 0;
  for (; r0 + 3 <= n; r0 += 3) values_rows<3, HC, halves>(scores + r0 * span_pad, v, s0, s1, span_pad, part_acc + r0 * hd);
  for (; r0 < n; ++r0) values_rows<1, HC, halves>(scores + r0 * span_pad, v, s0, s1, span_pad, part_acc + r0 * hd);
}

// fp32 -> the nearest bf16 (ties to even, as ATen's .to(bfloat16)) -> fp32, on 16 finite lanes
VA_INLINE v16 round_bf16(v16 x) {
  i16 b;
  std::memcpy(&b, &x, sizeof b);
  b = (b + 0x7FFF + ((b >> 16) & 1)) & static_cast<int32_t>(0xFFFF0000u);
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// p[s] = exp(p[s] - shift) for s in s0..s1-1 where visible, else 0, up to the next multiple of 16 (s0
// is one); returns their sum. With `round`, the p kept are rounded to bf16 after the sum is taken: what
// SDPA's flash kernel multiplies a bf16 V by.
// Lanes are cleared by a select on 8-lane halves (simd::where_lt), not a store per lane, which the AVX2
// clone compiles to scalar stores and a reload of the whole vector.
VA_INLINE float exp_shifted(float* __restrict p, float shift, const bool* __restrict visible, int64_t s0, int64_t s1,
                            bool round) {
  const v16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  v16 total = {};
  for (int64_t j = s0; j < s1; j += 16) {
    v16 e = exp16(load16(p + j) - shift);
    e = simd::where_lt(lane, v16{} + static_cast<float>(s1 - j), e, v16{});  // keys past the span: 0
    if (visible) {  // keys the mask hides: 0 (the mask row ends at the span: copy only its keys)
      float seen[16] = {};
      for (int64_t l = 0; l < std::min<int64_t>(16, s1 - j); ++l) seen[l] = visible[j + l] ? 0.0f : 1.0f;
      e = simd::where_lt(load16(seen), v16{} + 0.5f, e, v16{});
    }
    total += e;
    store16(p + j, round ? round_bf16(e) : e);
  }
  float sum = 0;
  for (int l = 0; l < 16; ++l) sum += total[l];
  return sum;
}

// The query rows of one KV head's group: row i is query head i % rep of token i / rep.
struct Rows {
  int64_t n;
  const float* q[kMaxQueryRows];
  const bool* visible[kMaxQueryRows];  // that token's mask row, or null: every key
};

// One part of the span (keys s0..s1-1): each row's scores, and their max over the visible keys.
template <int HC, typename KV>
VA_INLINE void part_scores(const Rows& rows, const KV* __restrict k, int64_t s0, int64_t s1, float scale,
                           int64_t span_pad, float* __restrict scores, float* __restrict part_max) {
  // three rows at a time where a head is 64 wide (their q, K's vectors and the tree fit the registers)
  constexpr int R = HC == 4 ? 3 : 1;
  int64_t r0 = 0;
  for (; r0 + R <= rows.n; r0 += R) scores_rows<R, HC>(rows.q + r0, k, s0, s1, scale, span_pad, scores + r0 * span_pad);
  for (; r0 < rows.n; ++r0) scores_rows<1, HC>(rows.q + r0, k, s0, s1, scale, span_pad, scores + r0 * span_pad);
  for (int64_t r = 0; r < rows.n; ++r) {
    float* sr = scores + r * span_pad;
    const bool* m = rows.visible[r];
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t s = s0; s < s1; ++s)
      if (!m || m[s]) best = std::max(best, sr[s]);
    part_max[r] = best;
  }
}

// One part of the span: p = exp(score - the row's max over the whole span), each row's sum of them, and
// sum of p * v (not yet normalised: as SDPA's flash kernel, the sum divides after the weighted sum).
template <int HC, typename KV>
VA_INLINE void part_values(const Rows& rows, const KV* __restrict v, int64_t s0, int64_t s1, int64_t span_pad,
                           const float* __restrict row_max, float* __restrict scores, float* __restrict part_sum,
                           float* __restrict part_acc) {
  const bool round = std::is_same<KV, c10::BFloat16>::value;
  for (int64_t r = 0; r < rows.n; ++r) {
    float* sr = scores + r * span_pad;
    if (row_max[r] == -std::numeric_limits<float>::infinity()) {  // no key visible: zeros, not NaN
      std::fill(sr + s0, sr + (s1 + 15) / 16 * 16, 0.0f);
      part_sum[r] = 0.0f;
    } else {
      part_sum[r] = exp_shifted(sr, row_max[r], rows.visible[r], s0, s1, round);
    }
  }
  if (simd::avx512_clones())
    values_all<HC, false>(rows.n, scores, v, s0, s1, span_pad, part_acc);
  else
    values_all<HC, true>(rows.n, scores, v, s0, s1, span_pad, part_acc);
}

// One clone set per phase and cache dtype (target_clones wants plain functions); head_dim 64 or 128.
#define VA_PHASES(SUFFIX, KV)                                                                                       \
  VA_CLONES void part_scores_##SUFFIX(const Rows& rows, const KV* k, int64_t hd, int64_t s0, int64_t s1, float scale, \
                                      int64_t span_pad, float* scores, float* part_max) {                           \
    if (hd == 64)                                                                                                   \
      part_scores<4>(rows, k, s0, s1, scale, span_pad, scores, part_max);                                          \
    else                                                                                                            \
      part_scores<8>(rows, k, s0, s1, scale, span_pad, scores, part_max);                                          \
  }                                                                                                                 \
  VA_CLONES void part_values_##SUFFIX(const Rows& rows, const KV* v, int64_t hd, int64_t s0, int64_t s1,             \
                                      int64_t span_pad, const float* row_max, float* scores, float* part_sum,       \
                                      float* part_acc) {                                                            \
    if (hd == 64)                                                                                                   \
      part_values<4>(rows, v, s0, s1, span_pad, row_max, scores, part_sum, part_acc);                              \
    else                                                                                                            \
      part_values<8>(rows, v, s0, s1, span_pad, row_max, scores, part_sum, part_acc);                              \
  }                                                                                                                 \
  inline void part_scores_any(const Rows& rows, const KV* k, int64_t hd, int64_t s0, int64_t s1, float scale,        \
                              int64_t span_pad, float* scores, float* part_max) {                                   \
    part_scores_##SUFFIX(rows, k, hd, s0, s1, scale, span_pad, scores, part_max);                                   \
  }                                                                                                                 \
  inline void part_values_any(const Rows& rows, const KV* v, int64_t hd, int64_t s0, int64_t s1, int64_t span_pad,   \
                              const float* row_max, float* scores, float* part_sum, float* part_acc) {              \
    part_values_##SUFFIX(rows, v, hd, s0, s1, span_pad, row_max, scores, part_sum, part_acc);                       \
  }
VA_PHASES(bf16, c10::BFloat16)
VA_PHASES(f32, float)
#undef VA_PHASES

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

// Where one query group (the `rep` query heads of one KV head, each at T positions) reads and writes.
struct Group {
  Rows rows;
  size_t base;  // its K/V in the cache, in elements
};

Group group_of(const Pass& p, const float* q, int layer, int64_t group) {
  const int64_t b = group / p.n_kv_heads, g = group % p.n_kv_heads, rep = p.n_heads / p.n_kv_heads;
  Group out;
  out.rows.n = p.tokens * rep;
  const bool* mask = p.mask ? p.mask + b * p.mask_rows * p.span : nullptr;
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t r = 0; r < rep; ++r) {
      out.rows.q[t * rep + r] = q ? q + ((b * p.tokens + t) * p.n_heads + g * rep + r) * p.head_dim : nullptr;
      out.rows.visible[t * rep + r] = mask ? mask + t * p.span : nullptr;
    }
  out.base = ((static_cast<size_t>(layer) * p.batch + b) * p.n_kv_heads + g) * p.capacity * p.head_dim;
  return out;
}

// Part `part` of the span: keys [begin, end), whole blocks of 16 but the last.
void part_keys(const Pass& p, int part, int64_t& begin, int64_t& end) {
  const int64_t blocks = (p.span + 15) / 16, half = blocks / 2 * 16;
  begin = part == 0 ? 0 : half;
  end = part == 0 ? half : p.span;
}

int64_t span_pad(const Pass& p) { return (p.span + 15) / 16 * 16; }

template <typename KV>
void scores_part(const Pass& p, const float* q, int layer, int64_t group, int part, const AttendScratch& s) {
  const Group g = group_of(p, q, layer, group);
  int64_t s0, s1;
  part_keys(p, part, s0, s1);
  part_scores_any(g.rows, static_cast<const KV*>(p.k_cache) + g.base, p.head_dim, s0, s1,
                  1.0f / std::sqrt(static_cast<float>(p.head_dim)), span_pad(p), s.scores, s.part_max + part * g.rows.n);
}

template <typename KV>
void values_part(const Pass& p, int layer, int64_t group, int part, const AttendScratch& s) {
  const Group g = group_of(p, nullptr, layer, group);
  const int64_t n = g.rows.n;
  float row_max[kMaxQueryRows];
  for (int64_t r = 0; r < n; ++r) {
    row_max[r] = s.part_max[r];
    for (int k = 1; k < kSpanParts; ++k) row_max[r] = std::max(row_max[r], s.part_max[k * n + r]);
  }
  int64_t s0, s1;
  part_keys(p, part, s0, s1);
  part_values_any(g.rows, static_cast<const KV*>(p.v_cache) + g.base, p.head_dim, s0, s1, span_pad(p), row_max,
                  s.scores, s.part_sum + part * n, s.part_acc + part * n * p.head_dim);
}

// the parts' weighted sums / the parts' sums, each added in part order, into y, rounded as SDPA on a bf16 cache returns it (bf16), so that the
// o-projection sees the same kind of input
template <typename KV>
void combine(const Pass& p, float* y, int64_t group, const AttendScratch& s) {
  const int64_t b = group / p.n_kv_heads, g = group % p.n_kv_heads, rep = p.n_heads / p.n_kv_heads;
  const int64_t n = p.tokens * rep, hd = p.head_dim;
  for (int64_t i = 0; i < n; ++i) {
    float total = s.part_sum[i];
    for (int k = 1; k < kSpanParts; ++k) total += s.part_sum[k * n + i];
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;  // 0: no key visible
    float acc[512];
    std::memcpy(acc, s.part_acc + i * hd, hd * sizeof(float));
    for (int k = 1; k < kSpanParts; ++k)
      for (int64_t j = 0; j < hd; ++j) acc[j] += s.part_acc[(k * n + i) * hd + j];
    float* dst = y + ((b * p.tokens + i / rep) * p.n_heads + g * rep + i % rep) * hd;
    for (int64_t j = 0; j < hd; ++j) dst[j] = bf16_to_float(from_float<KV>(acc[j] * inv));
  }
}

// RoPE of `heads` heads of one token (x: heads x hd), each value rounded to bf16 where `to_bf16` (the
// cache's dtype) and kept as an fp32: out = x * cos + rotate_half(x) * ssin. -ffp-contract=off: each
// multiply and add rounds as ATen's do, so q, K and V are bit-identical to engine/model.py's.
__attribute__((optimize("fp-contract=off"))) VA_CLONES void rope_heads(const float* __restrict x,
                                                                       const float* __restrict c,
                                                                       const float* __restrict sn, int64_t heads,
                                                                       int64_t hd, bool to_bf16, float* __restrict out) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const float* xh = x + h * hd;
    float* o = out + h * hd;
    for (int64_t j = 0; j < half; ++j) o[j] = xh[j] * c[j] + xh[j + half] * sn[j];
    for (int64_t j = half; j < hd; ++j) o[j] = xh[j] * c[j] + xh[j - half] * sn[j];
    if (to_bf16)
      for (int64_t j = 0; j < hd; j += 16) store16(o + j, round_bf16(load16(o + j)));
  }
}

// x rounded to bf16 (finite values: as c10::BFloat16 rounds them), kept as fp32
VA_CLONES void round_bf16_rows(const float* __restrict x, int64_t n, float* __restrict out) {
  for (int64_t j = 0; j < n; j += 16) store16(out + j, round_bf16(load16(x + j)));
}

// fp32 values that are already bf16 numbers -> the cache's dtype (exact)
inline void store_kv(c10::BFloat16* dst, const float* src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    uint32_t bits;
    std::memcpy(&bits, src + j, sizeof bits);
    dst[j].x = static_cast<uint16_t>(bits >> 16);
  }
}
inline void store_kv(float* dst, const float* src, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

template <typename KV>
void rope_and_write(const Pass& p, const float* qkv, const float* cos, const float* ssin, float* q, int layer) {
  const int64_t hd = p.head_dim, nh = p.n_heads, nkv = p.n_kv_heads;
  const int64_t width = (nh + 2 * nkv) * hd;
  constexpr bool bf16 = std::is_same<KV, c10::BFloat16>::value;
  KV* kc = static_cast<KV*>(p.k_cache);
  KV* vc = static_cast<KV*>(p.v_cache);
  thread_local std::vector<float> buf;  // one token's K then V heads, rounded
  buf.resize(2 * nkv * hd);
  float* kv = buf.data();
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.tokens; ++t) {
      const int64_t row = b * p.tokens + t;
      const float* in = qkv + row * width;
      const float* c = cos + row * hd;
      const float* sn = ssin + row * hd;
      const int64_t slot = p.start >= 0 ? p.start + t : p.slots[row];
      rope_heads(in, c, sn, nh, hd, bf16, q + row * nh * hd);
      rope_heads(in + nh * hd, c, sn, nkv, hd, bf16, kv);
      if (bf16)
        round_bf16_rows(in + (nh + nkv) * hd, nkv * hd, kv + nkv * hd);
      else
        std::memcpy(kv + nkv * hd, in + (nh + nkv) * hd, nkv * hd * sizeof(float));
      for (int64_t h = 0; h < nkv; ++h) {
        const size_t at = (((static_cast<size_t>(layer) * p.batch + b) * nkv + h) * p.capacity + slot) * hd;
        store_kv(kc + at, kv + h * hd, hd);
        store_kv(vc + at, kv + (nkv + h) * hd, hd);
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

int64_t attend_scratch_floats(const Pass& p) {
  const int64_t n = p.tokens * (p.n_heads / p.n_kv_heads);
  return n * span_pad(p) + kSpanParts * n * (2 + p.head_dim);
}

AttendScratch attend_scratch(const Pass& p, float* base) {
  const int64_t n = p.tokens * (p.n_heads / p.n_kv_heads);
  AttendScratch s;
  s.scores = base;
  s.part_max = s.scores + n * span_pad(p);
  s.part_sum = s.part_max + kSpanParts * n;
  s.part_acc = s.part_sum + kSpanParts * n;
  return s;
}

void attend_scores(const Pass& p, const float* q, int layer, int64_t group, int part, const AttendScratch& s) {
  if (p.kv_bf16)
    scores_part<c10::BFloat16>(p, q, layer, group, part, s);
  else
    scores_part<float>(p, q, layer, group, part, s);
}

void attend_values(const Pass& p, int layer, int64_t group, int part, const AttendScratch& s) {
  if (p.kv_bf16)
    values_part<c10::BFloat16>(p, layer, group, part, s);
  else
    values_part<float>(p, layer, group, part, s);
}

void attend_combine(const Pass& p, float* y, int64_t group, const AttendScratch& s) {
  if (p.kv_bf16)
    combine<c10::BFloat16>(p, y, group, s);
  else
    combine<float>(p, y, group, s);
}

void attend(const Pass& p, const float* q, float* y, int layer, int64_t group_begin, int64_t group_end) {
  thread_local std::vector<float> buf;  // reused: no allocation a pass
  buf.resize(attend_scratch_floats(p));
  const AttendScratch s = attend_scratch(p, buf.data());
  for (int64_t g = group_begin; g < group_end; ++g) {
    for (int part = 0; part < kSpanParts; ++part) attend_scores(p, q, layer, g, part, s);
    for (int part = 0; part < kSpanParts; ++part) attend_values(p, layer, g, part, s);
    attend_combine(p, y, g, s);
  }
}

void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) silu_mul_row(gate_up + r * 2 * n, gate_up + r * 2 * n + n, out + r * n, n);
}

void add(float* x, const float* y, int64_t n) { add_row(x, y, n); }

}  // namespace narrow
