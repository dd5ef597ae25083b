// Every layer of a w8a8 pass in one C++ call (engine/native.py says when it runs).
//
// A wide pass makes the same ATen ops, in the same order and dtypes, as engine/model.py's
// Layer.forward and engine/quant.py's W8A8Linear take for it: a bf16 stream into the de-quantised
// weights packed for oneDNN, bit-identical hidden states and K/V (tests/test_native.py). A narrow pass
// (at most `dense_above` rows, an fp32 stream into int8 x int8 linears) runs narrow_kernels.cpp's hand
// loops between its linears, and up to gemv::kMaxRows rows on several threads all its layers in one
// OpenMP region (narrow_pass.cpp); `fused_narrow = false` gives it the ATen ops instead.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include "int8_gemv.h"
#include "narrow_kernels.h"
#include "narrow_pass.h"

namespace py = pybind11;

// A W8A8Linear's int8 weight [N, K] for narrow passes through int8_gemv.cpp, with its per-channel
// scales, row sums (for the activations' zero point) and bias.
class Int8Matrix {
 public:
  // `isa`: "auto" (the best this CPU has), or "avx512_vnni" / "avx2" to run that kernel (tests run both)
  Int8Matrix(at::Tensor weight, at::Tensor scales, c10::optional<at::Tensor> bias, const std::string& isa)
      : isa_(gemv::named(isa)), w_(weight.contiguous()), scales_(scales.to(at::kFloat).contiguous()),
        rowsum_(weight.to(at::kInt).sum(1).to(at::kInt).contiguous()),
        bias_(bias ? c10::optional<at::Tensor>(bias->to(at::kFloat).contiguous()) : c10::nullopt) {
    TORCH_CHECK(w_.scalar_type() == at::kChar && w_.dim() == 2, "Int8Matrix: an int8 [N, K] weight");
    TORCH_CHECK(gemv::supported(isa_, w_.size(1)), "Int8Matrix: no ", isa, " int8 kernel on this CPU for K=", w_.size(1));
  }

  static bool available(int64_t k) { return gemv::supported(gemv::named("auto"), k); }

  // x [..., K] (1 to gemv::kMaxRows rows) -> fp32 [..., N]
  at::Tensor forward(const at::Tensor& x) const {
    const gemv::Matrix mat = matrix();
    const int64_t n = mat.n, k = mat.k;
    auto x2 = x.reshape({-1, k}).to(at::kFloat).contiguous();
    const int64_t m = x2.size(0);
    TORCH_CHECK(m >= 1 && m <= gemv::kMaxRows, "Int8Matrix: 1 to ", gemv::kMaxRows, " rows, got ", m);
    auto xq = at::empty({m, k}, x2.options().dtype(at::kByte));
    const auto q = gemv::quantize(x2.data_ptr<float>(), m * k, xq.data_ptr<uint8_t>());
    auto y = at::empty({m, n}, x2.options());
    const uint8_t* xp = xq.data_ptr<uint8_t>();
    float* yp = y.data_ptr<float>();
    // a thread's share should stream at least ~150 KB of weights, or waking it costs more than it gives
    const int64_t grain = std::max<int64_t>(64, 150000 / k);
    at::parallel_for(0, n, grain, [&](int64_t n0, int64_t n1) { gemv::product(mat, xp, m, q, yp, n0, n1); });
    auto shape = x.sizes().vec();
    shape.back() = n;
    return y.view(shape);
  }

  gemv::Matrix matrix() const {
    return {isa_, w_.data_ptr<int8_t>(), scales_.data_ptr<float>(), rowsum_.data_ptr<int32_t>(),
            bias_ ? bias_->data_ptr<float>() : nullptr, w_.size(0), w_.size(1)};
  }

 private:
  gemv::Isa isa_;
  at::Tensor w_, scales_, rowsum_;
  c10::optional<at::Tensor> bias_;
};

// One W8A8Linear: its packed int8 params or its Int8Matrix (narrow passes) and its packed
// de-quantised weight and bias (wide passes).
struct Linear {
  c10::IValue packed;
  at::Tensor dense;
  c10::optional<at::Tensor> bias;
  at::ScalarType dense_dtype;
  std::shared_ptr<Int8Matrix> gemv;
};

class NativeLayers {
 public:
  // Per layer: the two RMSNorm weights in the model's dtype and in fp32, then 4 linears (qkv, o,
  // gate_up, down), each as (packed, dense_packed, bias or None, dense dtype name, Int8Matrix or None).
  NativeLayers(std::vector<at::Tensor> norms, std::vector<at::Tensor> norms_fp32, const std::vector<py::tuple>& linears,
               double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim)
      : norms_(std::move(norms)), norms_fp32_(std::move(norms_fp32)), eps_(eps), nh_(n_heads), nkv_(n_kv_heads),
        hd_(head_dim),
        linear_dynamic_(c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_dynamic", "")),
        linear_packed_(c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "")) {
    TORCH_CHECK(norms_.size() == norms_fp32_.size() && linears.size() == 2 * norms_.size(),
                "NativeLayers: 2 norms and 4 linears per layer");
    for (const auto& lin : linears) {
      auto bias = lin[2].is_none() ? c10::optional<at::Tensor>() : c10::optional<at::Tensor>(lin[2].cast<at::Tensor>());
      auto dtype = lin[3].cast<std::string>() == "bfloat16" ? at::kBFloat16 : at::kFloat;
      auto gemv = lin[4].is_none() ? nullptr : lin[4].cast<std::shared_ptr<Int8Matrix>>();
      linears_.push_back({torch::jit::toIValue(lin[0], c10::AnyType::get()), lin[1].cast<at::Tensor>(), bias, dtype, gemv});
    }
    bool all_gemv = true;
    for (const auto& l : linears_) all_gemv = all_gemv && l.gemv;
    for (size_t i = 0; all_gemv && i < norms_.size() / 2; ++i)
      layer_matrices_.push_back({norms_fp32_[2 * i].data_ptr<float>(), norms_fp32_[2 * i + 1].data_ptr<float>(),
                                 linears_[4 * i].gemv->matrix(), linears_[4 * i + 1].gemv->matrix(),
                                 linears_[4 * i + 2].gemv->matrix(), linears_[4 * i + 3].gemv->matrix()});
    for (const auto& l : layer_matrices_) {  // the one-region pass's scratch: the widest linear's in and out
      widest_k_ = std::max({widest_k_, l.qkv.k, l.o.k, l.gate_up.k, l.down.k});
    }
    one_region = all_gemv;
  }

  // x [B, T, D]: fp32 for a narrow pass, the model's dtype for a wide one; cos / ssin [B, T, 1, hd];
  // mask as engine.model.PassMask.sdpa (None: every key); k / v the cache's [L, B, KV, S, hd] tensors;
  // `start` >= 0: a one-row cache's first new slot (the new K/V go to start..start+T-1), else by
  // `slots` [B, T]; `span` key slots read; `fold` as PassMask; `narrow`: int8 x int8 linears.
  at::Tensor forward(at::Tensor x, const at::Tensor& cos, const at::Tensor& ssin, const c10::optional<at::Tensor>& mask,
                     const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t start, const at::Tensor& slots,
                     int64_t span, int64_t fold, bool narrow) const {
    if (narrow && fused_narrow && x.scalar_type() == at::kFloat && x.device().is_cpu() &&
        fusable(x.size(1), mask, k_cache, v_cache, slots, start))
      return forward_narrow(x, cos, ssin, mask, k_cache, v_cache, start, slots, span);
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    const auto kv_dtype = k_cache.scalar_type();
    at::Tensor rows;
    if (start < 0) rows = at::arange(b, slots.options()).unsqueeze(1).expand_as(slots);
    for (size_t i = 0; i < norms_.size() / 2; ++i) {
      // attention: RMSNorm, q/k/v, RoPE on q and k side by side, written to the cache in its dtype
      auto h = rms_norm(x, 2 * i);
      auto qkv = linear(h, 4 * i, narrow).view({b, t, nh_ + 2 * nkv_, hd_});
      auto qk_in = qkv.narrow(2, 0, nh_ + nkv_).to(at::kFloat);
      auto qk = (qk_in * cos + qk_in.roll({hd_ / 2}, {-1}) * ssin).to(kv_dtype);
      auto q = qk.narrow(2, 0, nh_).transpose(1, 2);
      auto k = qk.narrow(2, nh_, nkv_).transpose(1, 2);
      auto v = qkv.narrow(2, nh_ + nkv_, nkv_).to(kv_dtype).transpose(1, 2);
      auto kb = k_cache.select(0, i), vb = v_cache.select(0, i);
      if (start >= 0) {  // KVCache.write, one row
        kb.select(0, 0).narrow(1, start, t).copy_(k.select(0, 0));
        vb.select(0, 0).narrow(1, start, t).copy_(v.select(0, 0));
      } else {
        kb.permute({0, 2, 1, 3}).index_put_({rows, slots}, k.transpose(1, 2));
        vb.permute({0, 2, 1, 3}).index_put_({rows, slots}, v.transpose(1, 2));
      }
      auto ks = kb.narrow(2, 0, span), vs = vb.narrow(2, 0, span);
      at::Tensor y;
      if (fold > 1) {
        y = at::scaled_dot_product_attention(q.reshape({b, nkv_, fold * t, hd_}), ks, vs, mask).view({b, nh_, t, hd_});
      } else {
        y = at::scaled_dot_product_attention(q, ks, vs, mask, 0.0, false, c10::nullopt, nh_ != nkv_);
      }
      x = x + linear(y.transpose(1, 2).reshape({b, t, -1}), 4 * i + 1, narrow);
      // MLP: RMSNorm, gate and up as one linear, SiLU(gate) * up, down
      h = rms_norm(x, 2 * i + 1);
      auto gate_up = linear(h, 4 * i + 2, narrow).chunk(2, -1);
      x = x + linear(at::silu(gate_up[0]) * gate_up[1], 4 * i + 3, narrow);
    }
    return x;
  }

  // The model's ends, for narrow_logits: in front its token embedding [V, D] (any float dtype) and RoPE
  // tables [max_len, hd] (cos, and sin with its first half negated: engine.model.signed_sin), fp32;
  // behind, its final RMSNorm's fp32 weight and its LM head.
  void set_ends(at::Tensor embed, at::Tensor rope_cos, at::Tensor rope_ssin, at::Tensor norm_fp32,
                std::shared_ptr<Int8Matrix> lm_head) {
    TORCH_CHECK(embed.dim() == 2 && embed.is_contiguous() && (embed.scalar_type() == at::kBFloat16 ||
                embed.scalar_type() == at::kFloat), "set_ends: a contiguous bf16 or fp32 [V, D] embedding");
    for (const auto* t : {&rope_cos, &rope_ssin, &norm_fp32})
      TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous(), "set_ends: contiguous fp32 tables");
    TORCH_CHECK(rope_cos.sizes() == rope_ssin.sizes() && rope_cos.size(1) == hd_, "set_ends: [max_len, head_dim] RoPE tables");
    embed_ = std::move(embed);
    rope_cos_ = std::move(rope_cos);
    rope_ssin_ = std::move(rope_ssin);
    head_norm_ = std::move(norm_fp32);
    head_ = std::move(lm_head);
    widest_k_ = std::max(widest_k_, head_->matrix().k);
  }

  // The logits [N, V] fp32 of a pass over a cache at its rows `read` (indices into its B * T tokens),
  // where it is narrow (at most `narrow_up_to` tokens) and runs in one region: from the token ids to the
  // logits in one call, its embedding, RoPE rows and mask read here, not by ATen ops (after a pass has
  // streamed the weights through the caches, each ATen op costs tens of microseconds). Else None, and
  // the caller takes engine/model.py's way. tokens and positions [B, T] int64; mask [B, 1, T, S] bool
  // (S: the span of key slots read); the rest as forward().
  c10::optional<at::Tensor> narrow_logits(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& mask,
                                          const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t start,
                                          const at::Tensor& slots, const at::Tensor& read, int64_t narrow_up_to) const {
    const int64_t b = tokens.size(0), t = tokens.size(1), rows = b * t, d = head_norm_.defined() ? head_norm_.size(0) : 0;
    if (!head_ || !fused_narrow || rows > narrow_up_to || !in_one_region(rows) || !tokens.device().is_cpu() ||
        !fusable(t, mask, k_cache, v_cache, slots, start) || mask.dim() != 4 || mask.size(2) != t)
      return c10::nullopt;
    TORCH_CHECK(tokens.scalar_type() == at::kLong && positions.scalar_type() == at::kLong &&
                positions.sizes() == tokens.sizes(), "narrow_logits: int64 [B, T] tokens and positions");
    TORCH_CHECK(read.scalar_type() == at::kLong && read.dim() == 1 && read.numel() >= 1 && read.numel() <= rows,
                "narrow_logits: 1 to ", rows, " int64 rows to read, got ", read.numel());
    auto tok = tokens.contiguous(), pos = positions.contiguous(), idx = read.contiguous();
    const int64_t* tp = tok.data_ptr<int64_t>();
    const int64_t* pp = pos.data_ptr<int64_t>();
    const int64_t* ip = idx.data_ptr<int64_t>();
    for (int64_t i = 0; i < idx.numel(); ++i)
      TORCH_CHECK(ip[i] >= 0 && ip[i] < rows, "narrow_logits: read row ", ip[i], " is outside the pass");
    thread_local std::vector<float> front;  // x, cos and ssin rows: reused, no allocation a pass
    front.resize(rows * (d + 2 * hd_));
    float* x = front.data();
    float* cosf = x + rows * d;
    float* ssinf = cosf + rows * hd_;
    for (int64_t r = 0; r < rows; ++r) {
      TORCH_CHECK(tp[r] >= 0 && tp[r] < embed_.size(0), "narrow_logits: token ", tp[r], " is outside the vocabulary");
      TORCH_CHECK(pp[r] >= 0 && pp[r] < rope_cos_.size(0), "narrow_logits: position ", pp[r], " is past the RoPE table");
      if (embed_.scalar_type() == at::kBFloat16) {  // bf16 -> fp32 is exact: engine.model's .float()
        const c10::BFloat16* e = embed_.data_ptr<c10::BFloat16>() + tp[r] * d;
        for (int64_t j = 0; j < d; ++j) x[r * d + j] = static_cast<float>(e[j]);
      } else {
        std::memcpy(x + r * d, embed_.data_ptr<float>() + tp[r] * d, d * sizeof(float));
      }
      std::memcpy(cosf + r * hd_, rope_cos_.data_ptr<float>() + pp[r] * hd_, hd_ * sizeof(float));
      std::memcpy(ssinf + r * hd_, rope_ssin_.data_ptr<float>() + pp[r] * hd_, hd_ * sizeof(float));
    }
    auto visible = mask.contiguous();
    const bool* vp = visible.data_ptr<bool>();
    const bool every_key = std::all_of(vp, vp + visible.numel(), [](bool v) { return v; });  // as PassMask: no mask
    const narrow::Pass p = pass_of(b, t, mask.size(3), every_key ? nullptr : vp, t, k_cache, v_cache, start, slots);
    auto logits = at::empty({idx.numel(), head_->matrix().n}, tokens.options().dtype(at::kFloat));
    const narrow::Head head{head_norm_.data_ptr<float>(), head_->matrix(), ip, idx.numel(), logits.data_ptr<float>()};
    run_region(p, x, d, cosf, ssinf, &head);
    return logits;
  }

  // Narrow passes run the hand loops of narrow_kernels.cpp around the linears (false: the ATen ops
  // above, as the Python layers take them; for tests and same-run comparisons).
  bool fused_narrow = true;
  // Passes of up to gemv::kMaxRows rows on several threads run every layer in one OpenMP region (narrow_pass.cpp), where
  // every linear has an Int8Matrix; false: a parallel op per linear (for same-run comparisons).
  bool one_region = true;

 private:
  // Whether the hand loops take a pass of t tokens a row over this cache.
  bool fusable(int64_t t, const c10::optional<at::Tensor>& mask, const at::Tensor& k_cache, const at::Tensor& v_cache,
               const at::Tensor& slots, int64_t start) const {
    const auto kv = k_cache.scalar_type();
    return k_cache.device().is_cpu() && (kv == at::kBFloat16 || kv == at::kFloat) &&
           v_cache.scalar_type() == kv && k_cache.is_contiguous() && v_cache.is_contiguous() && (hd_ == 64 || hd_ == 128) &&
           t * (nh_ / nkv_) <= narrow::kMaxQueryRows &&
           (!mask || mask->scalar_type() == at::kBool) &&
           (start >= 0 || (slots.scalar_type() == at::kLong && slots.is_contiguous()));
  }

  // A narrow pass of b x t tokens over `span` key slots of this cache, `visible` [b, 1, mask_rows, span] or null.
  narrow::Pass pass_of(int64_t b, int64_t t, int64_t span, const bool* visible, int64_t mask_rows,
                       const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t start, const at::Tensor& slots) const {
    return {b, t, nh_, nkv_, hd_, k_cache.size(3), span, start, start >= 0 ? nullptr : slots.data_ptr<int64_t>(),
            visible, mask_rows, k_cache.data_ptr(), v_cache.data_ptr(), k_cache.scalar_type() == at::kBFloat16};
  }

  // Whether a fusable narrow pass of `rows` tokens runs every layer in one OpenMP region (narrow_pass.cpp).
  bool in_one_region(int64_t rows) const {
    return one_region && !layer_matrices_.empty() && rows <= gemv::kMaxRows && at::get_num_threads() > 1;
  }

  // Every layer (and `head`, where given) of a narrow pass in one region, x [rows, d] updated in place; its
  // scratch is this thread's, reused from pass to pass.
  void run_region(const narrow::Pass& p, float* x, int64_t d, const float* cosf, const float* ssinf,
                  const narrow::Head* head) const {
    const int64_t rows = p.batch * p.tokens, groups = p.batch * nkv_, per_group = narrow::attend_scratch_floats(p);
    const auto& l0 = layer_matrices_[0];
    const int64_t widths[] = {d, l0.qkv.n, nh_ * hd_, nh_ * hd_, d, l0.gate_up.n, l0.gate_up.n / 2};
    thread_local std::vector<float> buf;
    thread_local std::vector<uint8_t> xq;
    int64_t total = groups * per_group;
    for (int64_t w : widths) total += rows * w;
    buf.resize(total);
    xq.resize(rows * widest_k_);
    float* f[7];
    float* next = buf.data();
    for (int i = 0; i < 7; ++i) {
      f[i] = next;
      next += rows * widths[i];
    }
    narrow::Scratch sc{f[0], f[1], f[2], f[3], f[4], f[5], f[6], xq.data(), {}};
    for (int64_t g = 0; g < groups; ++g) sc.attend.push_back(narrow::attend_scratch(p, next + g * per_group));
    narrow::run_layers(p, x, d, static_cast<float>(eps_), layer_matrices_, cosf, ssinf, sc, at::get_num_threads(), head);
  }

  // A narrow pass: per layer four linears and hand loops between them.
  at::Tensor forward_narrow(at::Tensor x, const at::Tensor& cos, const at::Tensor& ssin,
                            const c10::optional<at::Tensor>& mask, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            int64_t start, const at::Tensor& slots, int64_t span) const {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), rows = b * t;
    x = x.contiguous().clone();  // the residual stream, updated in place
    auto cosf = cos.to(at::kFloat).contiguous(), ssinf = ssin.to(at::kFloat).contiguous();
    auto visible = mask ? mask->contiguous() : at::Tensor();  // a folded mask may be a strided view
    const narrow::Pass p = pass_of(b, t, span, mask ? visible.data_ptr<bool>() : nullptr, mask ? visible.size(2) : 0,
                                   k_cache, v_cache, start, slots);
    float* xs = x.data_ptr<float>();
    if (in_one_region(rows)) {
      run_region(p, xs, d, cosf.data_ptr<float>(), ssinf.data_ptr<float>(), nullptr);
      return x;
    }
    auto h = at::empty({b, t, d}, x.options());
    auto q = at::empty({rows, nh_ * hd_}, x.options());
    auto y = at::empty({b, t, nh_ * hd_}, x.options());
    const int64_t groups = b * nkv_;
    for (size_t i = 0; i < norms_.size() / 2; ++i) {
      narrow::rms_norm(xs, norms_fp32_[2 * i].data_ptr<float>(), h.data_ptr<float>(), rows, d, static_cast<float>(eps_));
      auto qkv = linear(h, 4 * i, true).contiguous();
      narrow::rope_write(p, qkv.data_ptr<float>(), cosf.data_ptr<float>(), ssinf.data_ptr<float>(), q.data_ptr<float>(),
                         static_cast<int>(i));
      // query groups split over the threads: against ATen's SDPA (flash) on the same pass, whole passes
      // at 1 / 2 / 3 / 4 / 6 / 8 tokens 8.9 / 10.2 / 11.5 / 11.6 / 16.8 / 20.1 ms vs 11.8 / 12.4 / 13.3 /
      // 12.7 / 18.0 / 19.9 (AMD EPYC with AVX512-BF16, 2 threads, 480-token cache, interleaved, 2026-12-06)
      at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
        narrow::attend(p, q.data_ptr<float>(), y.data_ptr<float>(), static_cast<int>(i), g0, g1);
      });
      auto o = linear(y, 4 * i + 1, true).contiguous();
      narrow::add(xs, o.data_ptr<float>(), rows * d);
      narrow::rms_norm(xs, norms_fp32_[2 * i + 1].data_ptr<float>(), h.data_ptr<float>(), rows, d,
                       static_cast<float>(eps_));
      auto gate_up = linear(h, 4 * i + 2, true).contiguous();
      const int64_t inter = gate_up.size(-1) / 2;
      auto act = at::empty({b, t, inter}, x.options());
      narrow::silu_mul(gate_up.data_ptr<float>(), act.data_ptr<float>(), rows, inter);
      auto down = linear(act, 4 * i + 3, true).contiguous();
      narrow::add(xs, down.data_ptr<float>(), rows * d);
    }
    return x;
  }

  // engine.model.RMSNorm: one op on an fp32 stream; in fp32, then weighted in the stream's dtype, else.
  at::Tensor rms_norm(const at::Tensor& x, size_t i) const {
    if (x.scalar_type() == at::kFloat) return at::rms_norm(x, {x.size(-1)}, norms_fp32_[i], eps_);
    return norms_[i] * at::rms_norm(x.to(at::kFloat), {x.size(-1)}, c10::nullopt, eps_).to(x.scalar_type());
  }

  // engine.quant.W8A8Linear.forward: the result in the input's dtype.
  at::Tensor linear(const at::Tensor& x, size_t i, bool narrow) const {
    const auto& lin = linears_[i];
    auto x2 = x.reshape({-1, x.size(-1)});
    at::Tensor y;
    if (narrow && lin.gemv && x2.size(0) <= gemv::kAloneRows) {
      y = lin.gemv->forward(x2).to(x.scalar_type());
    } else if (narrow) {  // reduce_range: 7-bit activations (the AVX2 u8 x s8 pair sums cannot saturate int16)
      std::vector<c10::IValue> stack{x2.to(at::kFloat).contiguous(), lin.packed, true};
      linear_dynamic_.callBoxed(&stack);
      y = stack[0].toTensor().to(x.scalar_type());
    } else {
      std::vector<c10::IValue> stack{x2.to(lin.dense_dtype).contiguous(), lin.dense, c10::IValue(),
                                     std::string("none"), c10::List<c10::optional<at::Scalar>>(),
                                     c10::optional<std::string>(std::string(""))};
      linear_packed_.callBoxed(&stack);
      y = stack[0].toTensor().to(x.scalar_type());
      if (lin.bias) y = y + lin.bias->to(x.scalar_type());
    }
    auto shape = x.sizes().vec();
    shape.back() = y.size(-1);
    return y.view(shape);
  }

  std::vector<at::Tensor> norms_, norms_fp32_;
  std::vector<Linear> linears_;
  std::vector<narrow::Layer> layer_matrices_;  // empty unless every linear has an Int8Matrix
  int64_t widest_k_ = 0;                         // over layer_matrices_ (and the head's)
  at::Tensor embed_, rope_cos_, rope_ssin_, head_norm_;  // set_ends()
  std::shared_ptr<Int8Matrix> head_;
  double eps_;
  int64_t nh_, nkv_, hd_;
  c10::OperatorHandle linear_dynamic_, linear_packed_;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Int8Matrix, std::shared_ptr<Int8Matrix>>(m, "Int8Matrix")
      .def(py::init<at::Tensor, at::Tensor, c10::optional<at::Tensor>, const std::string&>(), py::arg("weight"),
           py::arg("scales"), py::arg("bias"), py::arg("isa") = "auto")
      .def_static("available", &Int8Matrix::available)
      // the instruction set "auto" picks here: "avx512_vnni", "avx_vnni", "avx2" or "none"
      .def_static("isa", []() { return std::string(gemv::name_of(gemv::named("auto"))); })
      .def_readonly_static("max_rows", &gemv::kMaxRows)
      .def_readonly_static("alone_rows", &gemv::kAloneRows)
      .def("forward", [](const Int8Matrix& self, const at::Tensor& x) {
        py::gil_scoped_release no_gil;
        return self.forward(x);
      });
  py::class_<NativeLayers>(m, "NativeLayers")
      .def(py::init<std::vector<at::Tensor>, std::vector<at::Tensor>, const std::vector<py::tuple>&, double, int64_t,
                    int64_t, int64_t>())
      // without the GIL: other calls' threads run Python meanwhile
      .def("forward", &NativeLayers::forward, py::call_guard<py::gil_scoped_release>())
      .def("set_ends", &NativeLayers::set_ends)
      .def("narrow_logits", &NativeLayers::narrow_logits, py::call_guard<py::gil_scoped_release>())
      .def_readwrite("fused_narrow", &NativeLayers::fused_narrow)
      .def_readwrite("one_region", &NativeLayers::one_region);
}
