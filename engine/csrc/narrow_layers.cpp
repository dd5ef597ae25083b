// Every layer of a w8a8 narrow pass in one C++ call (engine/native.py says when it runs).
//
// The same ATen ops, in the same order and dtypes, as engine/model.py's Layer.forward takes for such
// a pass (fp32 stream, fused q/k/v and gate/up, int8 x int8 linears, a bf16 KV cache), so the
// hidden states and the K/V written are bit-identical (tests/test_native.py). What it saves is
// Python: ~25 dispatched ops and 6 module calls a layer cost a 1-token pass about a third of its time.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

namespace py = pybind11;

class NarrowLayers {
 public:
  // `packed`: per layer, the packed int8 params of qkv, o, gate_up and down (W8A8Linear._packed).
  NarrowLayers(std::vector<at::Tensor> input_norms, std::vector<at::Tensor> post_norms,
               const std::vector<py::object>& packed, double eps, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim)
      : input_norms_(std::move(input_norms)), post_norms_(std::move(post_norms)), eps_(eps), nh_(n_heads),
        nkv_(n_kv_heads), hd_(head_dim),
        linear_dynamic_(c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_dynamic", "")) {
    TORCH_CHECK(packed.size() == 4 * input_norms_.size() && post_norms_.size() == input_norms_.size(),
                "NarrowLayers: 4 packed linears and 2 norms per layer");
    for (const auto& p : packed) packed_.push_back(torch::jit::toIValue(p, c10::AnyType::get()));
  }

  // x [B, T, D] fp32; cos / ssin [B, T, 1, hd]; mask as engine.model.PassMask.sdpa (None: every key);
  // k / v the cache's [L, B, KV, S, hd] tensors; `start` >= 0: a one-row cache's first new slot (the
  // new K/V go to start..start+T-1), else `slots` [B, T]; `span` key slots read; `fold` as PassMask.
  at::Tensor forward(at::Tensor x, const at::Tensor& cos, const at::Tensor& ssin, const c10::optional<at::Tensor>& mask,
                     const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t start, const at::Tensor& slots,
                     int64_t span, int64_t fold) const {
    py::gil_scoped_release no_gil;  // other calls' threads run Python meanwhile
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    const auto kv_dtype = k_cache.scalar_type();
    at::Tensor rows;
    if (start < 0) rows = at::arange(b, slots.options()).unsqueeze(1).expand_as(slots);
    for (size_t i = 0; i < input_norms_.size(); ++i) {
      // attention: RMSNorm, q/k/v, RoPE on q and k side by side, written to the cache in its dtype
      auto h = at::rms_norm(x, {d}, input_norms_[i], eps_);
      auto qkv = linear(h.reshape({-1, d}).contiguous(), packed_[4 * i]).view({b, t, nh_ + 2 * nkv_, hd_});
      auto qk_in = qkv.narrow(2, 0, nh_ + nkv_);
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
      y = y.transpose(1, 2).reshape({b, t, -1});
      // o_proj returns its input's dtype (W8A8Linear), so the attention output is rounded to the cache's
      auto o = linear(y.reshape({-1, nh_ * hd_}).to(at::kFloat).contiguous(), packed_[4 * i + 1]).to(y.scalar_type());
      x = x + o.view({b, t, d});
      // MLP: RMSNorm, gate and up as one linear, SiLU(gate) * up, down
      h = at::rms_norm(x, {d}, post_norms_[i], eps_);
      auto gate_up = linear(h.reshape({-1, d}).contiguous(), packed_[4 * i + 2]).view({b, t, -1}).chunk(2, -1);
      auto act = at::silu(gate_up[0]) * gate_up[1];
      auto m = linear(act.reshape({-1, act.size(-1)}).contiguous(), packed_[4 * i + 3]);
      x = x + m.view({b, t, d});
    }
    return x;
  }

 private:
  at::Tensor linear(const at::Tensor& x, const c10::IValue& packed) const {
    // reduce_range: 7-bit activations, as W8A8Linear (the AVX2 u8 x s8 pair sums cannot saturate int16)
    std::vector<c10::IValue> stack{x, packed, true};
    linear_dynamic_.callBoxed(&stack);
    return stack[0].toTensor();
  }

  std::vector<at::Tensor> input_norms_, post_norms_;
  std::vector<c10::IValue> packed_;
  double eps_;
  int64_t nh_, nkv_, hd_;
  c10::OperatorHandle linear_dynamic_;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<NarrowLayers>(m, "NarrowLayers")
      .def(py::init<std::vector<at::Tensor>, std::vector<at::Tensor>, const std::vector<py::object>&, double, int64_t,
                    int64_t, int64_t>())
      .def("forward", &NarrowLayers::forward);
}
