// Weight-only int4 linear for decode-sized batches on the CPU, over llmd's own packing:
// out = x W^T + b with W[n, k] = (q[n, k] - zero[g, n]) * scale[g, n], g = k / group_size.
//
// Layout (packed once at load by Int4Linear): output rows in blocks of 32, each block K
// records of 16 bytes; byte j of record k holds row 32b + j in its low nibble and row
// 32b + 16 + j in its high one, as q + 8 (0..15). One record is one column of 32 rows, so
// the lanes run along N: a record widens (and, shift, subtract 8, vpmovsxbd, vcvtdq2ps) into
// two 16-lane vectors that each activation row meets with one FMA by its broadcast x[m, k].
// Any K and any group size work; a group's partial sums take their scale (and zero point,
// by the group's sum of x) once per group. Each block is read once for all rows of a call,
// and blocks are split across at::parallel_for threads; a single row walks two blocks at
// once (the two halves of its thread's range), since one stream left it waiting on memory.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "weight_only_rows.h"

namespace {

using llmd_cpu::kMaxRowTile;
using llmd_cpu::vec16;

constexpr int64_t kBlockRows = 32;  // output rows per block of the packing
constexpr int64_t kRecordBytes = 16;
constexpr int64_t kPrefetchRecords = 512;  // 8 KiB ahead of the stream
template <int MT>
constexpr int kChains = MT >= 3 ? 1 : 4 / MT;

struct Int4Weight {
  const uint8_t* packed;      // [N_pad / 32, K, 16]
  const float* scales;        // [G, N_pad]
  const float* zero_points;   // [G, N_pad] or null (symmetric)
  int64_t padded_rows, k, group_size;
};

// acc[m][h] (rows 32b + 16h .. + 16) for MT activation rows of x ([MT, K] float32) and
// their per-group sums x_sums ([MT, G]).
template <int MT>
void block_tile(const Int4Weight& w, int64_t block, const float* __restrict__ x,
                const float* __restrict__ x_sums, int64_t num_groups, vec16 acc[][2]) {
  const uint8_t* records = w.packed + block * w.k * kRecordBytes;
  const int64_t row0 = block * kBlockRows;
  for (int m = 0; m < MT; ++m) acc[m][0] = acc[m][1] = vec16{};
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t k_begin = g * w.group_size, k_end = std::min(w.k, k_begin + w.group_size);
    // kChains independent sums per lane keep the FMA latency hidden at 1-2 rows.
    vec16 part[MT][2][kChains<MT>] = {};
    int64_t i = k_begin;
    for (; i + kChains<MT> <= k_end; i += kChains<MT>) {
      __builtin_prefetch(records + (i + kPrefetchRecords) * kRecordBytes);
      for (int c = 0; c < kChains<MT>; ++c) {
        vec16 w_low, w_high;
        llmd_cpu::widen_nibbles(records + (i + c) * kRecordBytes, w_low, w_high);
        for (int m = 0; m < MT; ++m) {
          const float xv = x[m * w.k + i + c];
          part[m][0][c] += w_low * xv;
          part[m][1][c] += w_high * xv;
        }
      }
    }
    for (; i < k_end; ++i) {
      vec16 w_low, w_high;
      llmd_cpu::widen_nibbles(records + i * kRecordBytes, w_low, w_high);
      for (int m = 0; m < MT; ++m) {
        const float xv = x[m * w.k + i];
        part[m][0][0] += w_low * xv;
        part[m][1][0] += w_high * xv;
      }
    }
    for (int m = 0; m < MT; ++m)
      for (int h = 0; h < 2; ++h)
        for (int c = 1; c < kChains<MT>; ++c) part[m][h][0] += part[m][h][c];
    const float* scale = w.scales + g * w.padded_rows + row0;
    const vec16 scale_v[2] = {llmd_cpu::load16(scale), llmd_cpu::load16(scale + 16)};
    if (w.zero_points != nullptr) {
      const float* zero = w.zero_points + g * w.padded_rows + row0;
      const vec16 zero_v[2] = {llmd_cpu::load16(zero), llmd_cpu::load16(zero + 16)};
      for (int m = 0; m < MT; ++m) {
        const float x_sum = x_sums[m * num_groups + g];
        for (int h = 0; h < 2; ++h) acc[m][h] += (part[m][h][0] - zero_v[h] * x_sum) * scale_v[h];
      }
    } else {
      for (int m = 0; m < MT; ++m)
        for (int h = 0; h < 2; ++h) acc[m][h] += part[m][h][0] * scale_v[h];
    }
  }
}

// One activation row against two blocks at once: two weight streams in flight (one
// stream per thread left the loop waiting on memory at one row).
void block_pair_row(const Int4Weight& w, int64_t block_a, int64_t block_b,
                    const float* __restrict__ x, const float* __restrict__ x_sums,
                    int64_t num_groups, vec16 acc[2][2]) {
  const uint8_t* records[2] = {w.packed + block_a * w.k * kRecordBytes,
                               w.packed + block_b * w.k * kRecordBytes};
  const int64_t row0[2] = {block_a * kBlockRows, block_b * kBlockRows};
  acc[0][0] = acc[0][1] = acc[1][0] = acc[1][1] = vec16{};
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t k_begin = g * w.group_size, k_end = std::min(w.k, k_begin + w.group_size);
    vec16 part[2][2][2] = {};  // [block][half][chain]
    int64_t i = k_begin;
    for (; i + 2 <= k_end; i += 2) {
      for (int b = 0; b < 2; ++b) {
        __builtin_prefetch(records[b] + (i + kPrefetchRecords) * kRecordBytes);
        for (int c = 0; c < 2; ++c) {
          vec16 w_low, w_high;
          llmd_cpu::widen_nibbles(records[b] + (i + c) * kRecordBytes, w_low, w_high);
          part[b][0][c] += w_low * x[i + c];
          part[b][1][c] += w_high * x[i + c];
        }
      }
    }
    for (; i < k_end; ++i) {
      for (int b = 0; b < 2; ++b) {
        vec16 w_low, w_high;
        llmd_cpu::widen_nibbles(records[b] + i * kRecordBytes, w_low, w_high);
        part[b][0][0] += w_low * x[i];
        part[b][1][0] += w_high * x[i];
      }
    }
    for (int b = 0; b < 2; ++b) {
      const float* scale = w.scales + g * w.padded_rows + row0[b];
      for (int h = 0; h < 2; ++h) {
        vec16 sum = part[b][h][0] + part[b][h][1];
        if (w.zero_points != nullptr)
          sum -= llmd_cpu::load16(w.zero_points + g * w.padded_rows + row0[b] + 16 * h) *
                 x_sums[g];
        acc[b][h] += sum * llmd_cpu::load16(scale + 16 * h);
      }
    }
  }
}

void check_weight(const at::Tensor& packed, const at::Tensor& scales,
                  const c10::optional<at::Tensor>& zero_points, int64_t group_size) {
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.dim() == 3 && packed.is_contiguous() &&
                  packed.size(2) == kRecordBytes,
              "packed must be a contiguous uint8 [out_features / 32, in_features, 16] tensor");
  const int64_t padded_rows = packed.size(0) * kBlockRows, k = packed.size(1);
  TORCH_CHECK(group_size > 0, "group_size must be positive");
  const int64_t num_groups = (k + group_size - 1) / group_size;
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.is_contiguous() && scales.dim() == 2 &&
                  scales.size(0) == num_groups && scales.size(1) == padded_rows,
              "scales must be a contiguous float32 [groups, padded out_features] tensor");
  TORCH_CHECK(!zero_points.has_value() ||
                  (zero_points->scalar_type() == at::kFloat && zero_points->is_contiguous() &&
                   zero_points->sizes() == scales.sizes()),
              "zero_points must be a contiguous float32 tensor of scales' shape");
}

Int4Weight weight_view(const at::Tensor& packed, const at::Tensor& scales,
                       const c10::optional<at::Tensor>& zero_points, int64_t group_size) {
  check_weight(packed, scales, zero_points, group_size);
  return Int4Weight{packed.data_ptr<uint8_t>(), scales.data_ptr<float>(),
                    zero_points.has_value() ? zero_points->data_ptr<float>() : nullptr,
                    packed.size(0) * kBlockRows, packed.size(1), group_size};
}

// out [M, N] = x [M, K] W^T + bias, N = out's width (at most the packing's padded rows).
void int4_linear_op(at::Tensor out, const at::Tensor& x, const at::Tensor& packed,
                    const at::Tensor& scales, const c10::optional<at::Tensor>& zero_points,
                    int64_t group_size, const c10::optional<at::Tensor>& bias) {
  const Int4Weight w = weight_view(packed, scales, zero_points, group_size);
  const int64_t n = out.size(1), num_rows = x.size(0);
  TORCH_CHECK(n <= w.padded_rows && n > w.padded_rows - kBlockRows,
              "out's width must be the weight's out_features");
  llmd_cpu::check_rows_and_out(out, x, bias, n, w.k);
  const int64_t num_groups = scales.size(0);
  const std::vector<float> xf = llmd_cpu::rows_as_float(x);
  std::vector<float> x_sums(static_cast<size_t>(num_rows * num_groups), 0.0f);
  for (int64_t m = 0; m < num_rows; ++m)
    for (int64_t i = 0; i < w.k; ++i) x_sums[m * num_groups + i / group_size] += xf[m * w.k + i];
  const std::vector<float> bf = llmd_cpu::bias_as_float(bias, n);
  std::vector<float> result(static_cast<size_t>(num_rows * n));
  at::parallel_for(0, packed.size(0), 1, [&](int64_t begin, int64_t end) {
    int64_t first = begin;
    if (num_rows == 1) {  // blocks in pairs, the two halves of this thread's range
      const int64_t half = (end - begin) / 2;
      for (int64_t a = begin; a < begin + half; ++a) {
        vec16 acc[2][2];
        block_pair_row(w, a, a + half, xf.data(), x_sums.data(), num_groups, acc);
        for (int b = 0; b < 2; ++b)
          for (int64_t j = 0; j < kBlockRows; ++j) {
            const int64_t row = (b == 0 ? a : a + half) * kBlockRows + j;
            if (row < n) result[row] = acc[b][j / 16][j % 16] + bf[row];
          }
      }
      first = begin + 2 * half;
    }
    for (int64_t block = first; block < end; ++block) {
      for (int64_t m0 = 0; m0 < num_rows; m0 += kMaxRowTile) {
        vec16 acc[kMaxRowTile][2];
        const float* xm = xf.data() + m0 * w.k;
        const float* sums = x_sums.data() + m0 * num_groups;
        const int64_t num_tile = std::min<int64_t>(kMaxRowTile, num_rows - m0);
        switch (num_tile) {
          case 1: block_tile<1>(w, block, xm, sums, num_groups, acc); break;
          case 2: block_tile<2>(w, block, xm, sums, num_groups, acc); break;
          case 3: block_tile<3>(w, block, xm, sums, num_groups, acc); break;
          default: block_tile<4>(w, block, xm, sums, num_groups, acc); break;
        }
        for (int64_t m = 0; m < num_tile; ++m)
          for (int64_t j = 0; j < kBlockRows && block * kBlockRows + j < n; ++j) {
            const int64_t row = block * kBlockRows + j;
            result[(m0 + m) * n + row] = acc[m][j / 16][j % 16] + bf[row];
          }
      }
    }
  });
  llmd_cpu::write_rows(out, result);
}

// The dense weight transposed, [K, N_pad] in out's dtype (float32 or bfloat16): what a
// prefill multiplies. Each record widens into two row vectors of column k, which take
// their group's scale and zero point and are stored contiguously, so the pass is vectorized
// end to end (a [N, K] result would need a transpose).
void int4_dequantize_op(at::Tensor out, const at::Tensor& packed, const at::Tensor& scales,
                        const c10::optional<at::Tensor>& zero_points, int64_t group_size) {
  const Int4Weight w = weight_view(packed, scales, zero_points, group_size);
  TORCH_CHECK(out.is_contiguous() && out.dim() == 2 && out.size(0) == w.k &&
                  out.size(1) == w.padded_rows &&
                  (out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16),
              "out must be a contiguous float32 or bfloat16 [in_features, padded out_features] "
              "tensor");
  const bool is_bf16 = out.scalar_type() == at::kBFloat16;
  void* dst = out.data_ptr();
  at::parallel_for(0, packed.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const uint8_t* records = w.packed + block * w.k * kRecordBytes;
      const int64_t row0 = block * kBlockRows;
      for (int64_t i = 0; i < w.k; ++i) {
        const int64_t at = (i / w.group_size) * w.padded_rows + row0;
        vec16 values[2];
        llmd_cpu::widen_nibbles(records + i * kRecordBytes, values[0], values[1]);
        for (int h = 0; h < 2; ++h) {
          vec16 weight = values[h];
          if (w.zero_points != nullptr) weight -= llmd_cpu::load16(w.zero_points + at + 16 * h);
          weight *= llmd_cpu::load16(w.scales + at + 16 * h);
          const int64_t offset = i * w.padded_rows + row0 + 16 * h;
          if (is_bf16) {
            llmd_cpu::store16_bf16(static_cast<uint16_t*>(dst) + offset, weight);
          } else {
            llmd_cpu::store16(static_cast<float*>(dst) + offset, weight);
          }
        }
      }
    }
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmd_cpu, m) {
  m.def(
      "int4_linear(Tensor(a!) out, Tensor x, Tensor packed, Tensor scales, Tensor? zero_points, "
      "int group_size, Tensor? bias) -> ()");
  m.impl("int4_linear", c10::DispatchKey::CPU, &int4_linear_op);
  m.def(
      "int4_dequantize(Tensor(a!) out, Tensor packed, Tensor scales, Tensor? zero_points, "
      "int group_size) -> ()");
  m.impl("int4_dequantize", c10::DispatchKey::CPU, &int4_dequantize_op);
}
