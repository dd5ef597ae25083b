// Hand loops for a narrow pass (engine/csrc/narrow_kernels.cpp says why and how they round).
#pragma once
#include <cstdint>

namespace narrow {

// Query rows of one KV head in a pass (tokens x query heads per KV head) the attention takes.
constexpr int64_t kMaxQueryRows = 128;

// One narrow pass over a KV cache laid out [L, B, KV, capacity, hd], contiguous.
struct Pass {
  int64_t batch, tokens, n_heads, n_kv_heads, head_dim, capacity, span;
  int64_t start;          // >= 0: one row, new K/V at start..start+T-1; else by `slots`
  const int64_t* slots;   // [B, T] when start < 0
  const bool* mask;       // [B, 1, mask_rows, span] (True: may attend), or null: every key
  int64_t mask_rows;
  void* k_cache;
  void* v_cache;
  bool kv_bf16;           // else fp32
};

// y[r] = x[r] / rms(x[r]) * w, rows of width d
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps);
// qkv [B*T, (nh + 2 nkv) * hd]: RoPE on q and k; q (rounded to the cache's dtype) to `q`
// [B*T, nh * hd], k and v into the cache at their slots
void rope_write(const Pass& p, const float* qkv, const float* cos, const float* ssin, float* q, int layer);
// Attention runs a query group (group = b * nkv + kv head) over kSpanParts parts of the span, in three
// phases: each part's scores and their max; each part's exp(score - the span's max) and weighted sum of
// V; the parts added, in order, and normalised. A pass splits its groups x parts over its threads, and
// every split adds the same numbers in the same order: the same bits on any thread count.
constexpr int kSpanParts = 2;

// One group's scratch: scores [rows, span padded to 16]; part_max and part_sum [kSpanParts, rows];
// part_acc [kSpanParts, rows, hd] (rows = tokens x query heads per KV head)
struct AttendScratch {
  float *scores, *part_max, *part_sum, *part_acc;
};
int64_t attend_scratch_floats(const Pass& p);
AttendScratch attend_scratch(const Pass& p, float* base);
// q [B*T, nh * hd] (after RoPE)
void attend_scores(const Pass& p, const float* q, int layer, int64_t group, int part, const AttendScratch& s);
// after every part's scores
void attend_values(const Pass& p, int layer, int64_t group, int part, const AttendScratch& s);
// after every part's values: into y [B*T, nh * hd]
void attend_combine(const Pass& p, float* y, int64_t group, const AttendScratch& s);
// all three phases for query groups [group_begin, group_end), on this thread
void attend(const Pass& p, const float* q, float* y, int layer, int64_t group_begin, int64_t group_end);
// out [rows, n] = SiLU(gate) * up, gate_up [rows, 2n]
void silu_mul(const float* gate_up, float* out, int64_t rows, int64_t n);
// x += y
void add(float* x, const float* y, int64_t n);

}  // namespace narrow
