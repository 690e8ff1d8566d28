// Pieces of the quantized panel (prefill) kernels shared by the AVX-512 and AMX files, which lay the
// panel out the same way (kernels_avx512_panel.cc): quads [K/4][16] of 4 levels per row, then scale[K/G][16]
// and min[K/G][16] as floats. Included inside each file's anonymous namespace, after it defines
// R = kPanelRows (same ODR rule as generic_impl.h: every including file compiles its own copy).
#pragma once

template <int G>
size_t qpanel_bytes(int64_t K) {
  return static_cast<size_t>(K) * R + 2 * static_cast<size_t>(K / G) * R * sizeof(float);
}
template <int G>
size_t qpanel_tmp_bytes(int64_t K) {
  return static_cast<size_t>(K) * R + 2 * static_cast<size_t>(K / G) * R * sizeof(float) + 64;
}

// k-quants: one row -> u (K levels <= 63, value = scale * u + min), sc and mn (K/G each).
template <typename Dec>
void unpack_row_kquant(const uint8_t* row, int64_t K, uint8_t* u, float* sc, float* mn) {
  constexpr int NG = 256 / Dec::G;
  const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(row);
  for (int64_t i = 0; i < K / 256; ++i) {
    __m256i v[8];
    alignas(32) float s[16], m[16];
    Dec::decode(blocks[i], v, s, m);
    for (int j = 0; j < 8; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 256 * i + 32 * j), v[j]);
    for (int g = 0; g < NG; ++g) {
      sc[i * NG + g] = s[g];
      mn[i * NG + g] = m[g];
    }
  }
}

// In-place transpose of a 16 x 16 matrix of 32-bit elements (v[i] = row i): 64 shuffles, which cost far
// less than 16 gathers of 16 elements would in the pack.
inline void transpose16x16_epi32(__m512i* v) {
  __m512i a[16], b[16];
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
  }
  // b[4g + c]: column 4L + c of rows 4g..4g+3 in 128-bit lane L.
  for (int g = 0; g < 4; ++g) {
    b[4 * g + 0] = _mm512_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 1] = _mm512_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 2] = _mm512_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
    b[4 * g + 3] = _mm512_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
  }
  // 4 x 4 transpose of 128-bit lanes across b[c], b[4 + c], b[8 + c], b[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i y0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44), y1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
    const __m512i y2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i y3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
    v[c] = _mm512_shuffle_i32x4(y0, y2, 0x88);
    v[4 + c] = _mm512_shuffle_i32x4(y0, y2, 0xDD);
    v[8 + c] = _mm512_shuffle_i32x4(y1, y3, 0x88);
    v[12 + c] = _mm512_shuffle_i32x4(y1, y3, 0xDD);
  }
}


// Packs n_rows (<= R) weight rows, unpacked by Unpack into levels, scales and mins, into a panel (layout
// above); rows past n_rows are zero (their outputs are never stored). tmp: qpanel_tmp_bytes(K).
template <int G, void (*Unpack)(const uint8_t*, int64_t, uint8_t*, float*, float*)>
void qpack(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel, uint8_t* tmp) {
  const int64_t ng = K / G;
  uint8_t* tu = tmp;
  auto* tsc = reinterpret_cast<float*>(tmp + static_cast<size_t>(K) * R);
  float* tmn = tsc + ng * R;
  for (int r = 0; r < n_rows; ++r)
    Unpack(w + r * w_stride, K, tu + r * K, tsc + r * ng, tmn + r * ng);
  // Transpose 64-byte chunks (16 quads) of the 16 rows in registers: quad k of every row -> one zmm
  // (rows past n_rows are zero). A 32-byte tail (odd block count) goes through the low halves.
  auto* pq = reinterpret_cast<__m512i*>(panel);
  for (int64_t k0 = 0; k0 < K; k0 += 64) {
    const bool half = K - k0 < 64;
    __m512i v[R];
    for (int r = 0; r < R; ++r) {
      if (r >= n_rows) {
        v[r] = _mm512_setzero_si512();
      } else if (half) {
        v[r] = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tu + r * K + k0)));
      } else {
        v[r] = _mm512_loadu_si512(tu + r * K + k0);
      }
    }
    transpose16x16_epi32(v);
    const int nq = half ? 8 : 16;
    for (int i = 0; i < nq; ++i) _mm512_storeu_si512(pq + k0 / 4 + i, v[i]);
  }
  auto* psc = reinterpret_cast<float*>(panel + static_cast<size_t>(K) * R);
  float* pmn = psc + ng * R;
  for (int64_t g = 0; g < ng; ++g)
    for (int r = 0; r < R; ++r) {
      psc[g * R + r] = r < n_rows ? tsc[r * ng + g] : 0.f;
      pmn[g * R + r] = r < n_rows ? tmn[r * ng + g] : 0.f;
    }
}
