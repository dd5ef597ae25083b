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
    auto acc = at::empty({m, n}, x2.options().dtype(at::kInt));
    auto y = at::empty({m, n}, x2.options());
    const uint8_t* xp = xq.data_ptr<uint8_t>();
    int32_t* ap = acc.data_ptr<int32_t>();
    float* yp = y.data_ptr<float>();
    // a thread's share should stream at least ~150 KB of weights, or waking it costs more than it gives
    const int64_t grain = std::max<int64_t>(64, 150000 / k);
    at::parallel_for(0, n, grain, [&](int64_t n0, int64_t n1) { gemv::product(mat, xp, m, q, ap, yp, n0, n1); });
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
      widest_n_ = std::max({widest_n_, l.qkv.n, l.o.n, l.gate_up.n, l.down.n});
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
    py::gil_scoped_release no_gil;  // other calls' threads run Python meanwhile
    if (narrow && fused_narrow && fusable(x, mask, k_cache, v_cache, slots, start))
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

  // Narrow passes run the hand loops of narrow_kernels.cpp around the linears (false: the ATen ops
  // above, as the Python layers take them; for tests and same-run comparisons).
  bool fused_narrow = true;
  // Passes of up to gemv::kMaxRows rows on several threads run every layer in one OpenMP region (narrow_pass.cpp), where
  // every linear has an Int8Matrix; false: a parallel op per linear (for same-run comparisons).
  bool one_region = true;

 private:
  bool fusable(const at::Tensor& x, const c10::optional<at::Tensor>& mask, const at::Tensor& k_cache,
               const at::Tensor& v_cache, const at::Tensor& slots, int64_t start) const {
    const auto kv = k_cache.scalar_type();
    return x.scalar_type() == at::kFloat && x.device().is_cpu() && (kv == at::kBFloat16 || kv == at::kFloat) &&
           v_cache.scalar_type() == kv && k_cache.is_contiguous() && v_cache.is_contiguous() && (hd_ == 64 || hd_ == 128) &&
           x.size(1) * (nh_ / nkv_) <= narrow::kMaxQueryRows &&
           (!mask || mask->scalar_type() == at::kBool) &&
           (start >= 0 || (slots.scalar_type() == at::kLong && slots.is_contiguous()));
  }

  // A narrow pass: per layer four ATen calls (the int8 x int8 linears) and hand loops between them.
  at::Tensor forward_narrow(at::Tensor x, const at::Tensor& cos, const at::Tensor& ssin,
                            const c10::optional<at::Tensor>& mask, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            int64_t start, const at::Tensor& slots, int64_t span) const {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), rows = b * t;
    x = x.contiguous().clone();  // the residual stream, updated in place
    auto cosf = cos.to(at::kFloat).contiguous(), ssinf = ssin.to(at::kFloat).contiguous();
    auto visible = mask ? mask->contiguous() : at::Tensor();  // a folded mask may be a strided view
    narrow::Pass p{b, t, nh_, nkv_, hd_, k_cache.size(3), span, start,
                   start >= 0 ? nullptr : slots.data_ptr<int64_t>(),
                   mask ? visible.data_ptr<bool>() : nullptr, mask ? visible.size(2) : 0,
                   k_cache.data_ptr(), v_cache.data_ptr(), k_cache.scalar_type() == at::kBFloat16};
    float* xs = x.data_ptr<float>();
    const int threads = at::get_num_threads();
    if (one_region && !layer_matrices_.empty() && rows <= gemv::kMaxRows && threads > 1) {
      const auto f = x.options();
      auto h = at::empty({rows, d}, f), qkv = at::empty({rows, layer_matrices_[0].qkv.n}, f);
      auto q = at::empty({rows, nh_ * hd_}, f), y = at::empty({rows, nh_ * hd_}, f), out = at::empty({rows, d}, f);
      auto gate_up = at::empty({rows, layer_matrices_[0].gate_up.n}, f);
      auto act = at::empty({rows, layer_matrices_[0].gate_up.n / 2}, f);
      auto xq = at::empty({rows, widest_k_}, f.dtype(at::kByte));
      auto acc = at::empty({rows, widest_n_}, f.dtype(at::kInt));
      narrow::Scratch sc{h.data_ptr<float>(), qkv.data_ptr<float>(), q.data_ptr<float>(), y.data_ptr<float>(),
                         out.data_ptr<float>(), gate_up.data_ptr<float>(), act.data_ptr<float>(),
                         xq.data_ptr<uint8_t>(), acc.data_ptr<int32_t>()};
      narrow::run_layers(p, xs, d, static_cast<float>(eps_), layer_matrices_, cosf.data_ptr<float>(),
                         ssinf.data_ptr<float>(), sc, threads);
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
  int64_t widest_n_ = 0, widest_k_ = 0;          // over layer_matrices_
  double eps_;
  int64_t nh_, nkv_, hd_;
  c10::OperatorHandle linear_dynamic_, linear_packed_;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Int8Matrix, std::shared_ptr<Int8Matrix>>(m, "Int8Matrix")
      .def(py::init<at::Tensor, at::Tensor, c10::optional<at::Tensor>, const std::string&>(), py::arg("weight"),
           py::arg("scales"), py::arg("bias"), py::arg("isa") = "auto")
      .def_static("available", &Int8Matrix::available)
      .def_readonly_static("max_rows", &gemv::kMaxRows)
      .def_readonly_static("alone_rows", &gemv::kAloneRows)
      .def("forward", [](const Int8Matrix& self, const at::Tensor& x) {
        py::gil_scoped_release no_gil;
        return self.forward(x);
      });
  py::class_<NativeLayers>(m, "NativeLayers")
      .def(py::init<std::vector<at::Tensor>, std::vector<at::Tensor>, const std::vector<py::tuple>&, double, int64_t,
                    int64_t, int64_t>())
      .def("forward", &NativeLayers::forward)
      .def_readwrite("fused_narrow", &NativeLayers::fused_narrow)
      .def_readwrite("one_region", &NativeLayers::one_region);
}
