// MmapFile: open + fstat + mmap(PROT_READ, MAP_PRIVATE); the descriptor is closed right after mapping.
#include "base/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry {

Expected<std::unique_ptr<MmapFile>> MmapFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return make_error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "%s: cannot open: %s",
                      path.c_str(), std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return make_error(ErrorCode::kIo, "%s: cannot stat: %s", path.c_str(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kIo, "%s: not a regular file", path.c_str());
  }
  std::unique_ptr<MmapFile> f(new MmapFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return make_error(ErrorCode::kIo, "%s: cannot mmap %zu bytes: %s", path.c_str(), f->size_,
                        std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file referenced
  return f;
}

MmapFile::~MmapFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MmapFile::advise_willneed(size_t offset, size_t length) const {
  if (data_ == nullptr || offset >= size_) return;
  // madvise needs a page-aligned start.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t start = offset / page * page;
  size_t end = length > size_ - offset ? size_ : offset + length;
  ::madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_WILLNEED);
}

void MmapFile::advise_sequential() const {
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_SEQUENTIAL);
}

}  // namespace ferry
