// CpuOps class (private to kernels/cpu): the Ops methods run the kernel table's functions over rows,
// split across the thread pool. Scratch buffers only grow, so after the first step of the largest
// size nothing allocates.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/kernels.h"

namespace ferry::kernels::cpu {

// A grow-only, 64-byte aligned byte buffer.
class Scratch {
 public:
  uint8_t* get(size_t bytes) {
    if (bytes > cap_) {
      cap_ = bytes + bytes / 4 + 4096;
      p_.reset(static_cast<uint8_t*>(::operator new[](cap_, std::align_val_t(64))));
    }
    return p_.get();
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<uint8_t[], Free> p_;
  size_t cap_ = 0;
};

// Direct path: rows are handed out in guided chunks, each (remaining rows) / (kGuidedDiv x threads)
// long but at least the grain, so chunks start large (few chunk starts) and shrink towards the end: a
// thread that finishes early waits at most about one grain (~16 KB of weights) for the others. Fixed
// chunks (say 8 per thread) would leave it waiting about half a chunk, which on an 8B model's gate/up
// is a visible share of a decode step spent spinning in the pool.
inline constexpr int64_t kGuidedDiv = 2;

// Direct path with several token groups: rows are walked in sub-chunks that stay in L2 while every
// token group passes over them.
inline constexpr size_t kDirectL2Bytes = 256 * 1024;

// Calls fn(r0, r1) over [0, n) in guided chunks on the pool.
template <typename F>
void guided_for(ThreadPool& pool, int64_t n, int64_t grain, F&& fn) {
  if (pool.size() == 1 || n <= grain) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t div = kGuidedDiv * pool.size();
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    int64_t b = next.load(std::memory_order_relaxed);
    while (b < n) {
      const int64_t len = std::min(n - b, std::max(grain, (n - b) / div));
      if (next.compare_exchange_weak(b, b + len, std::memory_order_relaxed)) {
        fn(b, b + len);
        b = next.load(std::memory_order_relaxed);
      }
    }
  });
}

class CpuOps final : public Ops {
 public:
  CpuOps(int n_threads, CpuIsa isa);
  const char* name() const override { return name_.c_str(); }

  void embed(const TensorView& table, const TensorView& tokens, float scale, TensorView out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps, TensorView out) override;
  void matmul(const TensorView& w, const TensorView& x, TensorView out) override;
  void matmul_many(int n, const TensorView* const* ws, const TensorView& x, TensorView* outs) override;
  void matmul_acc(const TensorView& w, const TensorView& x, TensorView tmp, TensorView acc) override;
  void add(const TensorView& a, const TensorView& b, TensorView out) override;
  void scale(const TensorView& x, float s, TensorView out) override;
  void rope(TensorView x, const BatchMeta& batch, const RopeParams& p) override;
  void rope_qk_store(TensorView q3, TensorView k3, const TensorView& k, const TensorView& v, const BatchMeta& batch,
                     const RopeParams& p, KvView kv) override;
  void kv_store(const TensorView& k, const TensorView& v, const BatchMeta& batch, KvView kv) override;
  void attention(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                 TensorView out) override;
  void glu(const TensorView& gate, const TensorView& up, Activation act, TensorView out) override;
  void gather_rows(const TensorView& x, const int32_t* rows, TensorView out) override;
  void matmul_id(int n, const TensorView* const* ws, const TensorView& x, const TensorView& ids, int32_t expert_begin,
                 TensorView* outs) override;
  void moe_combine(const TensorView& y, const TensorView& weights, TensorView out) override;
  void moe_experts(const ExpertGroup& g, const TensorView& x, const TensorView& ids, const TensorView& weights,
                   const MoeScratch& s, bool accumulate, TensorView out) override;
  // vision_ops.cc
  void rope_multi(TensorView x, const TensorView& pos, const RopeParams& p) override;
  void attention_segments(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& bounds,
                          float scale, TensorView out) override;
  void set_token_groups(int32_t n_tokens, int32_t n_decode) override {
    group_tokens_ = n_tokens;
    group_decode_ = n_decode;
  }

  ThreadPool& pool() { return pool_; }
  const KernelTable& table() const { return *tab_; }

 private:
  // Runs fn(i1, i2, i3) for every row of t (dims 1..3), in parallel when there is enough work.
  template <typename F>
  void for_rows(const TensorView& t, F&& fn);
  // Which kernels a matmul uses: by the token count, or fixed (set_token_groups).
  enum class MatPath : uint8_t { kByTokens, kDirect, kPanel };
  // matmul into out; with acc, each task then adds its rows of out into acc (acc += W x in the job).
  // Splits the columns by set_token_groups when that is on.
  void matmul_into(const TensorView& w, const TensorView& x, TensorView out, const TensorView* acc);
  void matmul_path(const TensorView& w, const TensorView& x, TensorView out, const TensorView* acc, MatPath path);
  // Attention of tokens [t0, n_tokens) as (token, head) work items over the pool.
  void attention_items(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p, int64_t t0,
                       TensorView out);
  // Decode attention of token t split over its visible cells (the table's attn_cells kernels).
  void attention_cells(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p, int64_t t,
                       TensorView out);

  const KernelTable* tab_;
  ThreadPool pool_;
  std::string name_;
  Scratch act_;        // matmul: converted activations
  Scratch per_thread_; // matmul panels, attention scores, RoPE tables (one slice per thread)
  Scratch moe_x_;      // matmul_id: inputs gathered in expert order [K, pairs] F32
  Scratch moe_y_;      // matmul_id: outputs in expert order, per weight [N_i, pairs] F32
  std::vector<int64_t> moe_first_;  // matmul_id: first pair of each expert (n_expert + 1)
  std::vector<int64_t> moe_order_;  // matmul_id: pairs (t * n_used + j) grouped by expert
  std::vector<int64_t> moe_next_;   // matmul_id: the counting sort's cursors
  struct IdSegment {
    int64_t e, first_row;  // a routed expert, the global index of its first row in the decode job
    int w;                 // which weight
  };
  std::vector<IdSegment> moe_segments_;  // matmul_id decode: (routed expert, weight) rows, in job order
  int32_t group_tokens_ = 0;   // set_token_groups: the step's token count,
  int32_t group_decode_ = -1;  // and its leading decode tokens (< 0: off)
};

// Sorts a token's visible cells vis[0, n) by the position each holds, when they are not in order
// already (cells freed by one sequence and taken by another interleave their positions).
void order_by_position(int32_t* vis, int n, const int32_t* cell_pos);

}  // namespace ferry::kernels::cpu
