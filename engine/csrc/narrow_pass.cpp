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

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace narrow {

namespace {

// How much of its next linear a thread prefetches (warm() below). Same process, interleaved, whole 1-token
// passes against none: 2 KB 3.5-7% faster, 4 KB 3-7%, 8 KB and 16 KB 0-3% (AMD EPYC, 2026-12-06).
constexpr int64_t kWarmBytes = 4096;

// A spinning thread's hint to the core (x86's pause, ARM's yield): it lets the sibling hyperthread run
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

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
      cpu_relax();
      if (spins > 20000) std::this_thread::yield();  // the other thread lost its core: let it run
    }
  }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<int> flag_{0};
};

// A thread's chunks of a linear's output rows: it takes them from the front, and a thread done with its own
// takes them from the back, so that a thread slowed by its core's other tenants holds no one up. Each
// thread still streams its own contiguous rows: handing out chunks in turn from one counter made whole
// 1-4-token passes 10-25% slower (AMD EPYC, 2026-12-06), the hardware prefetcher losing its stream.
class alignas(64) Share {
 public:
  void reset(int64_t begin, int64_t end) { range_.store(pack(begin, end), std::memory_order_relaxed); }
  int64_t front() { return take(true); }
  int64_t back() { return take(false); }

 private:
  static uint64_t pack(int64_t f, int64_t b) { return (static_cast<uint64_t>(f) << 32) | static_cast<uint64_t>(b); }
  int64_t take(bool from_front) {
    uint64_t r = range_.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t f = static_cast<int64_t>(r >> 32), b = static_cast<int64_t>(r & 0xffffffffu);
      if (f >= b) return -1;
      const uint64_t next = from_front ? pack(f + 1, b) : pack(f, b - 1);
      if (range_.compare_exchange_weak(r, next, std::memory_order_relaxed)) return from_front ? f : b - 1;
    }
  }
  std::atomic<uint64_t> range_{0};
};

// A linear's output rows in chunks of ~16 KB of weights, whole cache lines of y: the unit of Share.
struct Chunks {
  int64_t rows, count;
};

Chunks chunks_of(const gemv::Matrix& m) {
  const int64_t rows = std::max<int64_t>(16, (16384 / m.k + 15) / 16 * 16);
  return {rows, (m.n + rows - 1) / rows};
}

}  // namespace

void run_layers(const Pass& p, float* x, int64_t d, float eps, const std::vector<Layer>& layers, const float* cos,
                const float* ssin, const Scratch& s, int threads, const Head* head) {
  const int64_t rows = p.batch * p.tokens, groups = p.batch * p.n_kv_heads, items = groups * kSpanParts;
  SpinBarrier barrier(threads);
  gemv::Quant quant{};
  std::vector<Share> work(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    int sense = 0;
    // The first lines of this thread's share of the next linear, into L2 while the others catch up: each
    // share is a fresh stream the hardware prefetcher would otherwise start cold.
    auto warm = [&](const gemv::Matrix* next) {
      if (!next) return;
      const Chunks c = chunks_of(*next);
      const char* w0 = reinterpret_cast<const char*>(next->w + c.count * t / threads * c.rows * next->k);
      for (int64_t off = 0; off < kWarmBytes; off += 64) __builtin_prefetch(w0 + off, 0, 2);
    };
    // y [m_rows, m.n] = in . W^T: thread 0 quantises the input, each thread multiplies its share of the
    // rows of W, then takes what is left of the others'; then it warms its share of `next`.
    auto linear = [&](const gemv::Matrix& m, const float* in, float* y, int64_t m_rows, const gemv::Matrix* next) {
      const Chunks c = chunks_of(m);
      if (t == 0) quant = gemv::quantize(in, m_rows * m.k, s.xq);
      work[t].reset(c.count * t / threads, c.count * (t + 1) / threads);
      barrier.wait(sense);
      auto run = [&](int64_t i) { gemv::product(m, s.xq, m_rows, quant, y, i * c.rows, std::min(m.n, (i + 1) * c.rows)); };
      for (int64_t i; (i = work[t].front()) >= 0;) run(i);
      for (int other = 1; other < threads; ++other)
        for (int64_t i; (i = work[(t + other) % threads].back()) >= 0;) run(i);
      warm(next);
      barrier.wait(sense);
    };
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      if (t == 0) rms_norm(x, l.norm_attn, s.h, rows, d, eps);
      linear(l.qkv, s.h, s.qkv, rows, &l.o);
      if (t == 0) rope_write(p, s.qkv, cos, ssin, s.q, static_cast<int>(i));
      barrier.wait(sense);
      // attention: each thread a share of the (query group, part of the span) items, phase by phase
      // (narrow_kernels.h); splitting by group alone left one thread 2 of SmolLM2's 3 groups
      for (int64_t it = items * t / threads; it < items * (t + 1) / threads; ++it)
        attend_scores(p, s.q, static_cast<int>(i), it / kSpanParts, static_cast<int>(it % kSpanParts), s.attend[it / kSpanParts]);
      barrier.wait(sense);
      for (int64_t it = items * t / threads; it < items * (t + 1) / threads; ++it)
        attend_values(p, static_cast<int>(i), it / kSpanParts, static_cast<int>(it % kSpanParts), s.attend[it / kSpanParts]);
      barrier.wait(sense);
      if (t == 0)
        for (int64_t g = 0; g < groups; ++g) attend_combine(p, s.y, g, s.attend[g]);
      linear(l.o, s.y, s.out, rows, &l.gate_up);
      if (t == 0) {
        add(x, s.out, rows * d);
        rms_norm(x, l.norm_mlp, s.h, rows, d, eps);
      }
      linear(l.gate_up, s.h, s.gate_up, rows, &l.down);
      if (t == 0) silu_mul(s.gate_up, s.act, rows, l.gate_up.n / 2);
      linear(l.down, s.act, s.out, rows, i + 1 < layers.size() ? &layers[i + 1].qkv : head ? &head->lm : nullptr);
      if (t == 0) add(x, s.out, rows * d);
      // the next layer's first step is thread 0's, and the linear after it starts with a barrier
    }
    if (head) {  // the final norm of the rows read, and the LM head: its ~28 MB streams like the layers'
      if (t == 0)
        for (int64_t r = 0; r < head->n_read; ++r) rms_norm(x + head->read[r] * d, head->norm, s.h + r * d, 1, d, eps);
      linear(head->lm, s.h, head->logits, head->n_read, nullptr);
    }
  }
}

}  // namespace narrow
