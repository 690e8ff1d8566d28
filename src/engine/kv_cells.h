// KvCells: the bookkeeping half of the KV cache — which (sequence, position) each cell holds. The
// storage half (K/V tensors per layer) belongs to the StepRunner, which decides where it lives.
// A cell is empty (pos = seq = -1) or holds one token of one sequence; several sequences share the
// cells. Attention scans cells [0, scan_end()), so allocation is first-fit from the low end.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace ferry::engine {

class KvCells {
 public:
  explicit KvCells(int32_t n_cells) : pos_(n_cells, -1), seq_(n_cells, -1) {}

  int32_t size() const { return static_cast<int32_t>(pos_.size()); }
  int32_t n_used() const { return n_used_; }
  int32_t n_free() const { return size() - n_used_; }
  // 1 + the highest used cell (0 when empty): attention need not look further.
  int32_t scan_end() const;

  // Places n tokens (seq[i], pos[i]) in free cells, marking them used; *cells gets their indices.
  // kOutOfMemory when fewer than n cells are free (nothing is changed then).
  Status allocate(const int32_t* seq, const int32_t* pos, int32_t n, std::vector<int32_t>* cells);
  // Empties the given cells (undo of a failed step).
  void release(const std::vector<int32_t>& cells);

  // Empties the cells of `seq` (every sequence when seq < 0) with position in [p0, p1) (p1 < 0: no end).
  void seq_rm(int32_t seq, int32_t p0, int32_t p1);
  // 1 + the largest position `seq` holds, 0 when it holds none.
  int32_t seq_next_pos(int32_t seq) const;
  bool holds(int32_t seq, int32_t pos) const;

  const int32_t* pos_data() const { return pos_.data(); }  // [size()] position per cell, -1 = empty
  const int32_t* seq_data() const { return seq_.data(); }  // [size()] sequence per cell, -1 = empty

 private:
  std::vector<int32_t> pos_;
  std::vector<int32_t> seq_;
  int32_t n_used_ = 0;
};

}  // namespace ferry::engine
