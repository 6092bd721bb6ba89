// Weight-only int8 linear for decode-sized batches on the CPU: out = x (q * scale)^T + b
// with int8 codes q [N, K] (torch's own int8 layout, so no second copy) and one float32
// scale per output row.
//
// A decode step is bound by the weight bytes it reads, and torch's int8 kernel stays far
// from copy bandwidth at a few rows. Here each weight byte is read once for all activation
// rows: 16 codes are widened to float32 lanes along K (vpmovsxbd + vcvtdq2ps on AVX-512,
// the same generic vectors on AVX2) and meet the rows with one FMA apiece; the row's scale
// multiplies the finished dot product. Rows are split across at::parallel_for threads.
//
// Three loops, measured on the 2-core EPYC (scripts/bench_quant_kernels.py, one thread):
// - 1-2 activation rows read one weight row at a time, front to back: one sequential stream
//   per thread is what the hardware prefetcher follows best (9-17 GB/s at one row, against
//   6-8 for tiles of 4 weight rows read side by side, 4 streams one row apart);
// - 3 or more rows are bound by arithmetic instead. With AVX512-BF16 and bf16 rows, each
//   tile of 4 weight rows is made bf16 once (exact: the codes are small integers) into an
//   L1 buffer and meets every row by vdpbf16ps, 32 products a step: 6-7 GB/s at 4 rows and
//   2.5-2.9 at 16, against 4-6 and 1.0-1.2 for the float32 FMA tiles;
// - otherwise (AVX2, AVX-512 without BF16, float32 rows) tiles of 4 weight rows share each
//   float32 activation vector 4 times.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "weight_only_rows.h"

namespace {

using llmd_cpu::kMaxRowTile;
using llmd_cpu::vec16;

constexpr int kWeightRowTile = 4;         // weight rows per register tile (3+ activation rows)
constexpr int64_t kMaxStreamedRows = 2;   // activation rows that stream one weight row at a time
constexpr int64_t kPrefetchBytes = 8192;  // how far ahead of each tile row's stream to prefetch
constexpr int64_t kMinBytesPerTask = 1 << 14;  // fewer weight bytes cost more to hand out
template <int MT>
constexpr int kChains = 4 / MT;  // independent sums per lane hide the FMA latency

// dots[m] = x[m] . row for MT (1 or 2) activation rows (x: [MT, K] float32).
template <int MT>
void dot_row(const float* __restrict__ x, int64_t k, const int8_t* __restrict__ row,
             float dots[kMaxRowTile]) {
  constexpr int C = kChains<MT>;
  vec16 acc[MT][C] = {};
  int64_t i = 0;
  for (; i + 16 * C <= k; i += 16 * C) {
    for (int c = 0; c < C; ++c) {
      const vec16 w = llmd_cpu::widen_int8(row + i + 16 * c);
      for (int m = 0; m < MT; ++m) acc[m][c] += llmd_cpu::load16(x + m * k + i + 16 * c) * w;
    }
  }
  for (; i + 16 <= k; i += 16) {
    const vec16 w = llmd_cpu::widen_int8(row + i);
    for (int m = 0; m < MT; ++m) acc[m][0] += llmd_cpu::load16(x + m * k + i) * w;
  }
  for (int m = 0; m < MT; ++m) {
    for (int c = 1; c < C; ++c) acc[m][0] += acc[m][c];
    float sum = llmd_cpu::lane_sum16(acc[m][0]);
    for (int64_t t = i; t < k; ++t) sum += x[m * k + t] * static_cast<float>(row[t]);
    dots[m] = sum;
  }
}

// dots[m][j] = x[m] . w[rows[j]] for MT activation rows (x: [MT, K] float32).
template <int MT>
void dot_tile(const float* __restrict__ x, int64_t k, const int8_t* const rows[kWeightRowTile],
              bool is_streaming, float dots[kMaxRowTile][kWeightRowTile]) {
  vec16 acc[MT][kWeightRowTile] = {};
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    if (is_streaming && (i & 63) == 0)  // the next tile's line at this column streams in now
      for (int j = 0; j < kWeightRowTile; ++j) __builtin_prefetch(rows[j] + i + kPrefetchBytes);
    vec16 w[kWeightRowTile];
    for (int j = 0; j < kWeightRowTile; ++j) {
      w[j] = llmd_cpu::widen_int8(rows[j] + i);
    }
    for (int m = 0; m < MT; ++m) {
      const vec16 xv = llmd_cpu::load16(x + m * k + i);
      for (int j = 0; j < kWeightRowTile; ++j) acc[m][j] += xv * w[j];
    }
  }
  for (int m = 0; m < MT; ++m) {
    for (int j = 0; j < kWeightRowTile; ++j) {
      float sum = llmd_cpu::lane_sum16(acc[m][j]);
      for (int64_t t = i; t < k; ++t) sum += x[m * k + t] * static_cast<float>(rows[j][t]);
      dots[m][j] = sum;
    }
  }
}

// result[m, r] for weight rows [n_begin, n_end) and 1-2 activation rows, a row at a time.
void int8_rows_streamed(const float* x, int64_t num_rows, int64_t k, const int8_t* codes,
                        const float* scales, const float* bias, int64_t n_begin, int64_t n_end,
                        int64_t n, float* result) {
  for (int64_t r = n_begin; r < n_end; ++r) {
    float dots[kMaxRowTile];
    if (num_rows == 1) {
      dot_row<1>(x, k, codes + r * k, dots);
    } else {
      dot_row<2>(x, k, codes + r * k, dots);
    }
    for (int64_t m = 0; m < num_rows; ++m) result[m * n + r] = dots[m] * scales[r] + bias[r];
  }
}

// result[m, r] for weight rows [n_begin, n_end) and all M activation rows, in 4x4 tiles.
void int8_rows_tiled(const float* x, int64_t num_rows, int64_t k, const int8_t* codes,
                     const float* scales, const float* bias, int64_t n_begin, int64_t n_end,
                     int64_t n, float* result) {
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kWeightRowTile) {
    const int8_t* rows[kWeightRowTile];
    for (int j = 0; j < kWeightRowTile; ++j)  // past the end: repeat the last row, unused
      rows[j] = codes + std::min(n0 + j, n_end - 1) * k;
    for (int64_t m0 = 0; m0 < num_rows; m0 += kMaxRowTile) {
      float dots[kMaxRowTile][kWeightRowTile];
      const float* xm = x + m0 * k;
      switch (std::min<int64_t>(kMaxRowTile, num_rows - m0)) {
        case 1: dot_tile<1>(xm, k, rows, m0 == 0, dots); break;
        case 2: dot_tile<2>(xm, k, rows, m0 == 0, dots); break;
        case 3: dot_tile<3>(xm, k, rows, m0 == 0, dots); break;
        default: dot_tile<4>(xm, k, rows, m0 == 0, dots); break;
      }
      for (int64_t m = m0; m < std::min<int64_t>(num_rows, m0 + kMaxRowTile); ++m)
        for (int64_t j = 0; j < kWeightRowTile && n0 + j < n_end; ++j)
          result[m * n + n0 + j] = dots[m - m0][j] * scales[n0 + j] + bias[n0 + j];
    }
  }
}

#ifdef __AVX512BF16__
constexpr int64_t kDotStep = 32;  // K-values per vdpbf16ps

// 32 codes as bf16, exactly (integers up to 128 have 8 significant bits), zero past `count`.
inline __m512bh codes_as_bf16(const int8_t* p, int64_t count) {
  const __mmask32 mask = count >= 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
  const __m256i bytes = _mm256_maskz_loadu_epi8(mask, p);
  const __m512 low = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(bytes)));
  const __m512 high = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(bytes, 1)));
  return _mm512_cvtne2ps_pbh(high, low);
}

// dots[m][j] = x[m] . w[j] over kp (a multiple of 32) bf16 values, for MT rows of x.
template <int MT>
void dot_tile_bf16(const uint16_t* __restrict__ x, int64_t kp, const uint16_t* __restrict__ w,
                   float dots[kMaxRowTile][kWeightRowTile]) {
  __m512 acc[MT][kWeightRowTile];
  for (int m = 0; m < MT; ++m)
    for (int j = 0; j < kWeightRowTile; ++j) acc[m][j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < kp; i += kDotStep) {
    __m512bh wv[kWeightRowTile];
    for (int j = 0; j < kWeightRowTile; ++j)
      wv[j] = (__m512bh)_mm512_loadu_si512(w + j * kp + i);
    for (int m = 0; m < MT; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * kp + i);
      for (int j = 0; j < kWeightRowTile; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], xv, wv[j]);
    }
  }
  for (int m = 0; m < MT; ++m)
    _mm_storeu_ps(dots[m], llmd_cpu::sum_each(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
}

// result[m, r] for weight rows [n_begin, n_end) and 3+ bf16 activation rows (xb: [M, kp],
// zero past K): each tile of 4 weight rows is made bf16 once, into an L1 buffer, and meets
// every activation row from there with vdpbf16ps (32 products a step, the conversion paid
// once per weight for all rows instead of once per row tile).
void int8_rows_bf16(const uint16_t* xb, int64_t num_rows, int64_t k, int64_t kp,
                    const int8_t* codes, const float* scales, const float* bias, int64_t n_begin,
                    int64_t n_end, int64_t n, float* result) {
  std::vector<uint16_t> tile(static_cast<size_t>(kWeightRowTile * kp));
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kWeightRowTile) {
    for (int j = 0; j < kWeightRowTile; ++j) {  // past the end: repeat the last row, unused
      const int8_t* row = codes + std::min(n0 + j, n_end - 1) * k;
      for (int64_t i = 0; i < kp; i += kDotStep)
        _mm512_storeu_si512(tile.data() + j * kp + i, (__m512i)codes_as_bf16(row + i, k - i));
    }
    for (int64_t m0 = 0; m0 < num_rows; m0 += kMaxRowTile) {
      float dots[kMaxRowTile][kWeightRowTile];
      const uint16_t* xm = xb + m0 * kp;
      switch (std::min<int64_t>(kMaxRowTile, num_rows - m0)) {
        case 1: dot_tile_bf16<1>(xm, kp, tile.data(), dots); break;
        case 2: dot_tile_bf16<2>(xm, kp, tile.data(), dots); break;
        case 3: dot_tile_bf16<3>(xm, kp, tile.data(), dots); break;
        default: dot_tile_bf16<4>(xm, kp, tile.data(), dots); break;
      }
      for (int64_t m = m0; m < std::min<int64_t>(num_rows, m0 + kMaxRowTile); ++m)
        for (int64_t j = 0; j < kWeightRowTile && n0 + j < n_end; ++j)
          result[m * n + n0 + j] = dots[m - m0][j] * scales[n0 + j] + bias[n0 + j];
    }
  }
}

// bf16 rows [M, K] (any row stride) as [M, kp] bf16 bits, zero past K.
std::vector<uint16_t> padded_bf16_rows(const at::Tensor& x, int64_t kp) {
  const int64_t num_rows = x.size(0), k = x.size(1);
  std::vector<uint16_t> out(static_cast<size_t>(num_rows * kp), 0);
  const auto* src = reinterpret_cast<const uint16_t*>(x.data_ptr<c10::BFloat16>());
  for (int64_t r = 0; r < num_rows; ++r)
    std::copy(src + r * x.stride(0), src + r * x.stride(0) + k, out.data() + r * kp);
  return out;
}
#endif

// out [M, N] = x [M, K] (codes [N, K] int8 * scales [N] float32)^T + bias [N].
void int8_linear_op(at::Tensor out, const at::Tensor& x, const at::Tensor& codes,
                    const at::Tensor& scales, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(codes.scalar_type() == at::kChar && codes.dim() == 2 && codes.is_contiguous(),
              "codes must be a contiguous int8 [out_features, in_features] tensor");
  const int64_t n = codes.size(0), k = codes.size(1), num_rows = x.size(0);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.is_contiguous() &&
                  scales.numel() == n,
              "scales must be a contiguous float32 tensor of one scale per output row");
  llmd_cpu::check_rows_and_out(out, x, bias, n, k);
  const std::vector<float> bf = llmd_cpu::bias_as_float(bias, n);
  std::vector<float> result(static_cast<size_t>(num_rows * n));
  const int8_t* code_data = codes.data_ptr<int8_t>();
  const float* scale_data = scales.data_ptr<float>();
#ifdef __AVX512BF16__
  if (num_rows > kMaxStreamedRows && x.scalar_type() == at::kBFloat16) {
    const int64_t kp = (k + kDotStep - 1) / kDotStep * kDotStep;
    const std::vector<uint16_t> xb = padded_bf16_rows(x, kp);
    const int64_t num_tiles = (n + kWeightRowTile - 1) / kWeightRowTile;
    const int64_t grain = std::max<int64_t>(1, kMinBytesPerTask / (kWeightRowTile * k));
    at::parallel_for(0, num_tiles, grain, [&](int64_t begin, int64_t end) {
      int8_rows_bf16(xb.data(), num_rows, k, kp, code_data, scale_data, bf.data(),
                     begin * kWeightRowTile, std::min(n, end * kWeightRowTile), n,
                     result.data());
    });
    llmd_cpu::write_rows(out, result);
    return;
  }
#endif
  const std::vector<float> xf = llmd_cpu::rows_as_float(x);
  if (num_rows <= kMaxStreamedRows) {
    const int64_t grain = std::max<int64_t>(1, kMinBytesPerTask / k);
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
      int8_rows_streamed(xf.data(), num_rows, k, code_data, scale_data, bf.data(), begin, end,
                         n, result.data());
    });
  } else {
    const int64_t num_tiles = (n + kWeightRowTile - 1) / kWeightRowTile;
    const int64_t grain = std::max<int64_t>(1, kMinBytesPerTask / (kWeightRowTile * k));
    at::parallel_for(0, num_tiles, grain, [&](int64_t begin, int64_t end) {
      int8_rows_tiled(xf.data(), num_rows, k, code_data, scale_data, bf.data(),
                      begin * kWeightRowTile, std::min(n, end * kWeightRowTile), n,
                      result.data());
    });
  }
  llmd_cpu::write_rows(out, result);
}

// [N, K] codes * scales as out's dtype (float32 or bfloat16): the dense weight of a prefill.
void int8_dequantize_op(at::Tensor out, const at::Tensor& codes, const at::Tensor& scales) {
  TORCH_CHECK(codes.scalar_type() == at::kChar && codes.dim() == 2 && codes.is_contiguous(),
              "codes must be a contiguous int8 [out_features, in_features] tensor");
  const int64_t n = codes.size(0), k = codes.size(1);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == n && scales.is_contiguous(),
              "scales must be a contiguous float32 tensor of one scale per output row");
  TORCH_CHECK(out.is_contiguous() && out.dim() == 2 && out.size(0) == n && out.size(1) == k &&
                  (out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16),
              "out must be a contiguous float32 or bfloat16 tensor of codes' shape");
  const int8_t* code_data = codes.data_ptr<int8_t>();
  const float* scale_data = scales.data_ptr<float>();
  const bool is_bf16 = out.scalar_type() == at::kBFloat16;
  void* dst = out.data_ptr();
  at::parallel_for(0, n, std::max<int64_t>(1, kMinBytesPerTask / k), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int8_t* row = code_data + r * k;
      if (is_bf16) {
        uint16_t* bits = static_cast<uint16_t*>(dst) + r * k;
        for (int64_t i = 0; i < k; ++i)
          bits[i] = llmd_cpu::bf16_bits(static_cast<float>(row[i]) * scale_data[r]);
      } else {
        float* w = static_cast<float*>(dst) + r * k;
        for (int64_t i = 0; i < k; ++i) w[i] = static_cast<float>(row[i]) * scale_data[r];
      }
    }
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmd_cpu, m) {
  m.def("int8_linear(Tensor(a!) out, Tensor x, Tensor codes, Tensor scales, Tensor? bias) -> ()");
  m.impl("int8_linear", c10::DispatchKey::CPU, &int8_linear_op);
  m.def("int8_dequantize(Tensor(a!) out, Tensor codes, Tensor scales) -> ()");
  m.impl("int8_dequantize", c10::DispatchKey::CPU, &int8_dequantize_op);
}
