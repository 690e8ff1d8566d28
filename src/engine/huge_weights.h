// Weights in transparent huge pages for CPU inference: the model's tensors copied out of the file
// mapping into anonymous memory that the kernel backs with 2 MiB pages, and the weight views re-pointed
// there. A decode step streams every weight once; from the page cache (4 KiB pages) that is a TLB miss
// and a page walk (two-dimensional in a VM) every 4 KiB, and the hardware prefetchers stop at every
// 4 KiB boundary. The int8 decode kernels, which also compute, streamed ~5-10 % faster from huge pages
// on the 2-core development VM (bench/RESULTS_cpu.md); a plain read loop barely changed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "format/gguf.h"
#include "model/weights.h"

namespace ferry::engine {

// An anonymous mapping, unmapped on destruction.
class HugePageBuffer {
 public:
  HugePageBuffer(void* map, size_t map_bytes, uint8_t* data, size_t bytes)
      : map_(map), map_bytes_(map_bytes), data_(data), bytes_(bytes) {}
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* map_;
  size_t map_bytes_;
  uint8_t* data_;
  size_t bytes_;
};

// Copies the tensors `w` uses (the token embedding only when it is also the output head) into a
// huge-page buffer with n_threads threads and re-points w's views; the buffer must outlive every use
// of w. The file pages copied from are dropped from the process as the copy goes (when `file` is a file
// mapping), so the process holds about one copy of the weights, not two. Returns null and leaves w
// unchanged when transparent huge pages are off ("never"), when the copy would take more than half of the
// available memory, or when the mapping fails: the weights then stay in the file mapping, which is
// correct, only slower.
std::unique_ptr<HugePageBuffer> copy_weights_to_huge_pages(const gguf::ModelFile& file, model::ModelWeights* w,
                                                           int n_threads);

}  // namespace ferry::engine
