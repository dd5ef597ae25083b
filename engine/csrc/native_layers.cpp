// Every layer of a w8a8 pass in one C++ call (engine/native.py says when it runs).
//
// The same ATen ops, in the same order and dtypes, as engine/model.py's Layer.forward and
// engine/quant.py's W8A8Linear take for such a pass, so the hidden states and the K/V written are
// bit-identical (tests/test_native.py). A narrow pass (at most `dense_above` rows) carries an fp32
// stream into int8 x int8 linears; a wide one a bf16 stream into the de-quantised weights packed for
// oneDNN. What it saves is Python: ~25 dispatched ops and 6 module calls a layer cost a 1-token pass
// about a third of its time.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

namespace py = pybind11;

// One W8A8Linear: its packed int8 params (narrow passes) and its packed de-quantised weight and bias
// (wide passes).
struct Linear {
  c10::IValue packed;
  at::Tensor dense;
  c10::optional<at::Tensor> bias;
  at::ScalarType dense_dtype;
};

class NativeLayers {
 public:
  // Per layer: the two RMSNorm weights in the model's dtype and in fp32, then 4 linears (qkv, o,
  // gate_up, down), each as (packed, dense_packed, bias or None, dense dtype name).
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
      linears_.push_back({torch::jit::toIValue(lin[0], c10::AnyType::get()), lin[1].cast<at::Tensor>(), bias, dtype});
    }
  }

  // x [B, T, D]: fp32 for a narrow pass, the model's dtype for a wide one; cos / ssin [B, T, 1, hd];
  // mask as engine.model.PassMask.sdpa (None: every key); k / v the cache's [L, B, KV, S, hd] tensors;
  // `start` >= 0: a one-row cache's first new slot (the new K/V go to start..start+T-1), else by
  // `slots` [B, T]; `span` key slots read; `fold` as PassMask; `narrow`: int8 x int8 linears.
  at::Tensor forward(at::Tensor x, const at::Tensor& cos, const at::Tensor& ssin, const c10::optional<at::Tensor>& mask,
                     const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t start, const at::Tensor& slots,
                     int64_t span, int64_t fold, bool narrow) const {
    py::gil_scoped_release no_gil;  // other calls' threads run Python meanwhile
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

 private:
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
    if (narrow) {  // reduce_range: 7-bit activations (the AVX2 u8 x s8 pair sums cannot saturate int16)
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
  double eps_;
  int64_t nh_, nkv_, hd_;
  c10::OperatorHandle linear_dynamic_, linear_packed_;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<NativeLayers>(m, "NativeLayers")
      .def(py::init<std::vector<at::Tensor>, std::vector<at::Tensor>, const std::vector<py::tuple>&, double, int64_t,
                    int64_t, int64_t>())
      .def("forward", &NativeLayers::forward);
}
