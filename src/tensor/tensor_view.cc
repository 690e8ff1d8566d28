// TensorView helpers.
#include "tensor/tensor_view.h"

#include <cstdio>

#include "base/status.h"

namespace ferry {

bool TensorView::is_contiguous() const {
  size_t expect = traits(dtype).block_bytes;
  if (nb[0] != expect) return false;
  expect = row_size();
  for (int d = 1; d < 4; ++d) {
    if (ne[d] > 1 && nb[d] != expect) return false;
    expect *= static_cast<size_t>(ne[d]);
  }
  return true;
}

TensorView TensorView::make(DType t, void* data, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, Where where) {
  TensorView v;
  v.dtype = t;
  v.ne[0] = ne0;
  v.ne[1] = ne1;
  v.ne[2] = ne2;
  v.ne[3] = ne3;
  v.nb[0] = traits(t).block_bytes;
  v.nb[1] = row_bytes(t, ne0);
  v.nb[2] = v.nb[1] * static_cast<size_t>(ne1);
  v.nb[3] = v.nb[2] * static_cast<size_t>(ne2);
  v.data = data;
  v.where = where;
  return v;
}

TensorView TensorView::rows(int64_t r0, int64_t n) const {
  FERRY_ASSERT(ne[2] == 1 && ne[3] == 1 && r0 >= 0 && r0 + n <= ne[1]);
  TensorView v = *this;
  v.ne[1] = n;
  v.data = static_cast<char*>(data) + r0 * nb[1];
  v.nb[2] = nb[1] * static_cast<size_t>(n);
  v.nb[3] = v.nb[2];
  return v;
}

std::string TensorView::shape_str() const {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "[%lld, %lld, %lld, %lld] %s", static_cast<long long>(ne[0]),
                static_cast<long long>(ne[1]), static_cast<long long>(ne[2]), static_cast<long long>(ne[3]),
                dtype_name(dtype));
  return buf;
}

}  // namespace ferry
