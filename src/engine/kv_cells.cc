// KvCells: see kv_cells.h. Linear scans throughout: n_cells is at most a few hundred thousand and
// these run once per step, far below the cost of the step itself.
#include "engine/kv_cells.h"

namespace ferry::engine {

int32_t KvCells::scan_end() const {
  for (int32_t c = size(); c > 0; --c)
    if (seq_[c - 1] >= 0) return c;
  return 0;
}

Status KvCells::allocate(const int32_t* seq, const int32_t* pos, int32_t n, std::vector<int32_t>* cells) {
  cells->clear();
  if (n > n_free())
    return make_error(ErrorCode::kOutOfMemory, "KV cache full: the step needs %d cells but only %d of %d are free",
                      n, n_free(), size());
  cells->reserve(n);
  int32_t c = 0;
  for (int32_t i = 0; i < n; ++i) {
    while (seq_[c] >= 0) ++c;
    seq_[c] = seq[i];
    pos_[c] = pos[i];
    cells->push_back(c);
    ++n_used_;
  }
  return Status::ok();
}

void KvCells::release(const std::vector<int32_t>& cells) {
  for (int32_t c : cells) {
    if (seq_[c] < 0) continue;
    seq_[c] = -1;
    pos_[c] = -1;
    --n_used_;
  }
}

void KvCells::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
  for (int32_t c = 0; c < size(); ++c) {
    if (seq_[c] < 0 || (seq >= 0 && seq_[c] != seq)) continue;
    if (pos_[c] < p0 || (p1 >= 0 && pos_[c] >= p1)) continue;
    seq_[c] = -1;
    pos_[c] = -1;
    --n_used_;
  }
}

int32_t KvCells::seq_next_pos(int32_t seq) const {
  int32_t next = 0;
  for (int32_t c = 0; c < size(); ++c)
    if (seq_[c] == seq && pos_[c] + 1 > next) next = pos_[c] + 1;
  return next;
}

bool KvCells::holds(int32_t seq, int32_t pos) const {
  for (int32_t c = 0; c < size(); ++c)
    if (seq_[c] == seq && pos_[c] == pos) return true;
  return false;
}

}  // namespace ferry::engine
