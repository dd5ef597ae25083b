// Every layer of a narrow pass of up to gemv::kMaxRows rows in one OpenMP region (engine/csrc/narrow_pass.cpp says why).
#pragma once
#include <cstdint>
#include <vector>

#include "int8_gemv.h"
#include "narrow_kernels.h"

namespace narrow {

struct Layer {
  const float* norm_attn;  // the RMSNorm weights, fp32
  const float* norm_mlp;
  gemv::Matrix qkv, o, gate_up, down;
};

// Buffers for one pass, each [rows, its width]: h (dim), qkv, q and y (heads x head_dim), out (dim),
// gate_up, act (intermediate); xq for the widest linear's input.
struct Scratch {
  float *h, *qkv, *q, *y, *out, *gate_up, *act;
  uint8_t* xq;
  std::vector<AttendScratch> attend;  // one per query group
};

// The model's last steps for the rows a pass reads: its final RMSNorm and the LM head.
struct Head {
  const float* norm;    // fp32
  gemv::Matrix lm;      // [vocab, d]
  const int64_t* read;  // [n_read] indices into the pass's rows, n_read <= gemv::kMaxRows
  int64_t n_read;
  float* logits;        // [n_read, vocab]
};

// x [rows, d] (the fp32 residual stream) through every layer, on `threads` threads (>= 2); then, where
// `head` is given, the logits of its rows.
void run_layers(const Pass& p, float* x, int64_t d, float eps, const std::vector<Layer>& layers, const float* cos,
                const float* ssin, const Scratch& s, int threads, const Head* head);

}  // namespace narrow
