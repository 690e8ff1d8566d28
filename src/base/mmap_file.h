// MmapFile: a read-only memory map of a whole file (the GGUF reader's view of model weights).
// Opening never modifies the file. An empty file maps to {nullptr, 0}. Errors (missing file, not a
// regular file, mmap failure) come back as a Status naming the path; nothing here exits or throws.
// The mapping lives as long as the MmapFile object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace ferry {

class MmapFile {
 public:
  static Expected<std::unique_ptr<MmapFile>> open(const std::string& path);
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Hints to the kernel (best effort, errors ignored): the range will be read soon / sequentially.
  void advise_willneed(size_t offset, size_t length) const;
  void advise_sequential() const;

 private:
  MmapFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ferry
