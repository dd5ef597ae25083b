// int8 x int8 matrix-vector products for narrow passes (engine/csrc/int8_gemv.cpp says why).
#pragma once
#include <cstdint>
#include <string>

namespace gemv {

enum class Isa { none, avx2, avx_vnni, avx512_vnni };

// Rows of x these kernels take: up to kMaxRows inside a one-region pass (narrow_pass.cpp), where at 3 /
// 4 tokens whole passes measured 9.3-11.1 / 11.6-13.6 ms against 12.9-16.6 / 12.9-19.7 with FBGEMM on
// one thread (the cheaper count there); up to kAloneRows as a call of its own (a parallel op each),
// above which FBGEMM's GEMM is faster: whole passes at 3 / 4 / 6 / 8 tokens 9.2-12.7 / 10.9-12.7 /
// 14.7-15.1 / 17.9-20.2 ms against 8.7-12.0 / 9.5-11.4 / 11.6-13.1 / 13.8-15.2 (AMD EPYC with
// AVX512-BF16, interleaved, 2026-12-06).
constexpr int64_t kMaxRows = 4;
constexpr int64_t kAloneRows = 2;

struct Quant {
  float scale;
  int32_t zero_point;
};

// The instruction set this CPU multiplies int8 with (none: use PyTorch's kernel), as $VOICE_AGENT_CPU_ISA caps it.
Isa detect();
// "auto": detect(); "avx512_vnni" / "avx_vnni" / "avx2": that one where this CPU has it, else none
Isa named(const std::string& name);
// "avx512_vnni", "avx_vnni", "avx2" or "none"
const char* name_of(Isa isa);
bool supported(Isa isa, int64_t k);
// x [count] fp32 -> xq 7-bit unsigned, one scale and zero point for the whole input
Quant quantize(const float* x, int64_t count, uint8_t* xq);
// acc [m, ld]: acc[r, j - n0] = xq [m, k] . w [n, k]^T at (r, j) for j in n0..n1-1, in int32;
// 1 <= m <= kMaxRows
void rows(Isa isa, const uint8_t* xq, int64_t m, int64_t k, const int8_t* w, int64_t n0, int64_t n1, int64_t ld,
          int32_t* acc);
// One int8 matrix as the kernels take it.
struct Matrix {
  Isa isa;
  const int8_t* w;  // [n, k]
  const float* scales;
  const int32_t* rowsum;
  const float* bias;  // or null
  int64_t n, k;
};

// y [m, n], columns n0..n1-1 of it: xq [m, k] (quantised by `q`) . W^T
void product(const Matrix& mat, const uint8_t* xq, int64_t m, Quant q, float* y, int64_t n0, int64_t n1);

}  // namespace gemv
