// Every layer of a narrow pass of up to gemv::kMaxRows rows in one OpenMP region, its threads meeting at
// spin barriers.
//
// Why: the engine runs OpenMP with OMP_WAIT_POLICY=PASSIVE (engine/__init__.py: spinning collapses
// throughput when cores are shared), so each parallel op wakes its threads through the kernel. A
// 1-token pass has 121 linears, each worth splitting over the threads (a 1 MB weight streams in
// ~30 us), and those wake-ups cost more than the split gave: 2 threads 12.8-15.3 ms against 9.1-10.1
// on one (AMD EPYC with AVX512-BF16, 2026-12-06). Here the threads are woken once a pass and spin only
// while it runs.
#include "narrow_pass.h"

#include <immintrin.h>
#include <omp.h>

#include <atomic>
#include <thread>

namespace narrow {

namespace {

// A sense-reversing barrier: each thread flips its own sense, the last one in releases the rest.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}

  void wait(int& sense) {
    sense ^= 1;
    if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      flag_.store(sense, std::memory_order_release);
      return;
    }
    for (int spins = 0; flag_.load(std::memory_order_acquire) != sense; ++spins) {
      _mm_pause();
      if (spins > 20000) std::this_thread::yield();  // the other thread lost its core: let it run
    }
  }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<int> flag_{0};
};

// Thread t's share of n output rows, in whole cache lines of the result.
inline void share(int64_t n, int t, int threads, int64_t& n0, int64_t& n1) {
  const int64_t lines = (n + 15) / 16;
  n0 = std::min(n, lines * t / threads * 16);
  n1 = std::min(n, lines * (t + 1) / threads * 16);
}

}  // namespace

void run_layers(const Pass& p, float* x, int64_t d, float eps, const std::vector<Layer>& layers, const float* cos,
                const float* ssin, const Scratch& s, int threads) {
  const int64_t rows = p.batch * p.tokens, groups = p.batch * p.n_kv_heads;
  SpinBarrier barrier(threads);
  gemv::Quant quant{};
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    int sense = 0;
    // y = in . W^T: thread 0 quantises the input, each thread multiplies its share of the rows of W
    auto linear = [&](const gemv::Matrix& m, const float* in, float* y) {
      if (t == 0) quant = gemv::quantize(in, rows * m.k, s.xq);
      barrier.wait(sense);
      int64_t n0, n1;
      share(m.n, t, threads, n0, n1);
      gemv::product(m, s.xq, rows, quant, s.acc, y, n0, n1);
      barrier.wait(sense);
    };
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      if (t == 0) rms_norm(x, l.norm_attn, s.h, rows, d, eps);
      linear(l.qkv, s.h, s.qkv);
      if (t == 0) rope_write(p, s.qkv, cos, ssin, s.q, static_cast<int>(i));
      barrier.wait(sense);
      int64_t g0 = groups * t / threads, g1 = groups * (t + 1) / threads;
      attend(p, s.q, s.y, static_cast<int>(i), g0, g1);
      barrier.wait(sense);
      linear(l.o, s.y, s.out);
      if (t == 0) {
        add(x, s.out, rows * d);
        rms_norm(x, l.norm_mlp, s.h, rows, d, eps);
      }
      linear(l.gate_up, s.h, s.gate_up);
      if (t == 0) silu_mul(s.gate_up, s.act, rows, l.gate_up.n / 2);
      linear(l.down, s.act, s.out);
      if (t == 0) add(x, s.out, rows * d);
      // the next layer's first step is thread 0's, and the linear after it starts with a barrier
    }
  }
}

}  // namespace narrow
