// Every touched expert's linear of one MoE layer in one call on the CPU:
// out[s] = rows[s] W[e]^T for each slot s of expert e, the slots sorted by expert so that
// expert e owns rows [offsets[e], offsets[e + 1]).
//
// A decode step gives each of 64 experts a handful of rows. Run as one oneDNN GEMM per
// expert, each call's fixed cost (and waking the OpenMP team) outweighs the 1.5 MB of
// weights it reads; here one parallel region covers all (expert, tile of 16 weight rows)
// tasks, and each tile of 4 weight rows is read once from memory for all of its expert's
// rows. bf16 runs on AVX512-BF16 dot products (vdpbf16ps: two products per lane, summed in
// float32) where the CPU has them; otherwise bf16 is widened to float32 for FMAs, the path
// float32 weights always take. Results are rounded once to the output's dtype.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../quantization/csrc/weight_only_rows.h"

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

namespace {

using llmd_cpu::kMaxRowTile;
using llmd_cpu::vec16;

constexpr int kWeightRowTile = 4;     // weight rows per register tile
constexpr int64_t kTaskRows = 16;     // weight rows per task handed to a thread

// dots[m][j] = x[m] . w[j] for MT rows of x ([MT, K], float32) and 4 weight rows.
template <int MT, typename W>
void dot_tile_fma(const float* __restrict__ x, int64_t k, const W* const w[kWeightRowTile],
                  float dots[kMaxRowTile][kWeightRowTile]) {
  vec16 acc[MT][kWeightRowTile] = {};
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    vec16 wv[kWeightRowTile];
    for (int j = 0; j < kWeightRowTile; ++j) wv[j] = llmd_cpu::load16(w[j] + i);
    for (int m = 0; m < MT; ++m) {
      const vec16 xv = llmd_cpu::load16(x + m * k + i);
      for (int j = 0; j < kWeightRowTile; ++j) acc[m][j] += xv * wv[j];
    }
  }
  for (int m = 0; m < MT; ++m) {
    for (int j = 0; j < kWeightRowTile; ++j) {
      float sum = llmd_cpu::lane_sum16(acc[m][j]);
      for (int64_t t = i; t < k; ++t) sum += x[m * k + t] * llmd_cpu::to_float(w[j][t]);
      dots[m][j] = sum;
    }
  }
}

#ifdef __AVX512BF16__
// The same for bf16 rows and weights: 32 K-values a step, pairs summed by vdpbf16ps.
template <int MT>
void dot_tile_bf16(const c10::BFloat16* __restrict__ x, int64_t k,
                   const c10::BFloat16* const w[kWeightRowTile],
                   float dots[kMaxRowTile][kWeightRowTile]) {
  __m512 acc[MT][kWeightRowTile];
  for (int m = 0; m < MT; ++m)
    for (int j = 0; j < kWeightRowTile; ++j) acc[m][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    __m512bh wv[kWeightRowTile];
    for (int j = 0; j < kWeightRowTile; ++j)
      wv[j] = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(w[j] + i));
    for (int m = 0; m < MT; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(x + m * k + i));
      for (int j = 0; j < kWeightRowTile; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], xv, wv[j]);
    }
  }
  for (int m = 0; m < MT; ++m) {
    _mm_storeu_ps(dots[m], llmd_cpu::sum_each(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
    for (int j = 0; j < kWeightRowTile; ++j)
      for (int64_t t = i; t < k; ++t)
        dots[m][j] += static_cast<float>(x[m * k + t]) * static_cast<float>(w[j][t]);
  }
}

// Four finite floats stored as bfloat16, rounded to nearest even (integer ops).
inline void store4_bf16(c10::BFloat16* p, const float values[4]) {
  const __m128i bits = _mm_castps_si128(_mm_loadu_ps(values));
  const __m128i odd = _mm_and_si128(_mm_srli_epi32(bits, 16), _mm_set1_epi32(1));
  const __m128i rounded = _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(bits, odd),
                                                       _mm_set1_epi32(0x7FFF)), 16);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(rounded, rounded));
}
#endif

// One register tile of MT rows against 4 weight rows, on the path the dtypes take.
template <int MT, typename X, typename W>
void dot_tile(const X* x, int64_t k, const W* const w[kWeightRowTile],
              float dots[kMaxRowTile][kWeightRowTile]) {
#ifdef __AVX512BF16__
  if constexpr (std::is_same_v<X, c10::BFloat16>) {
    dot_tile_bf16<MT>(x, k, w, dots);
  } else
#endif
  {
    static_assert(std::is_same_v<X, float>, "rows reach the FMA path as float32");
    dot_tile_fma<MT>(x, k, w, dots);
  }
}

// out rows [first, end) x weight rows [n_begin, n_end) of one expert.
template <typename X, typename W, typename O>
void expert_tile(const X* x, int64_t first, int64_t end, int64_t k, const W* weight,
                 int64_t n_begin, int64_t n_end, int64_t n, O* out) {
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kWeightRowTile) {
    const W* w[kWeightRowTile];
    for (int j = 0; j < kWeightRowTile; ++j)  // past the end: repeat the last row, unused
      w[j] = weight + std::min(n0 + j, n_end - 1) * k;
    for (int64_t m0 = first; m0 < end; m0 += kMaxRowTile) {
      float dots[kMaxRowTile][kWeightRowTile];
      const X* xm = x + m0 * k;
      switch (std::min<int64_t>(kMaxRowTile, end - m0)) {
        case 1: dot_tile<1>(xm, k, w, dots); break;
        case 2: dot_tile<2>(xm, k, w, dots); break;
        case 3: dot_tile<3>(xm, k, w, dots); break;
        default: dot_tile<4>(xm, k, w, dots); break;
      }
      for (int64_t m = m0; m < std::min<int64_t>(end, m0 + kMaxRowTile); ++m) {
#ifdef __AVX512BF16__
        if constexpr (std::is_same_v<O, c10::BFloat16>) {
          if (n0 + kWeightRowTile <= n_end) {
            store4_bf16(out + m * n + n0, dots[m - m0]);
            continue;
          }
        }
#endif
        for (int64_t j = 0; j < kWeightRowTile && n0 + j < n_end; ++j)
          llmd_cpu::store_float(out + m * n + n0 + j, dots[m - m0][j]);
      }
    }
  }
}

// All tasks: (expert, first weight row) for every tile of every expert that has rows.
template <typename X, typename T>
void grouped_linear(const X* x, const T* weight, const int64_t* offsets,
                    const std::vector<int64_t>& touched, int64_t n, int64_t k, T* out) {
  const int64_t tiles_per_expert = (n + kTaskRows - 1) / kTaskRows;
  const int64_t num_tasks = static_cast<int64_t>(touched.size()) * tiles_per_expert;
  at::parallel_for(0, num_tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t expert = touched[task / tiles_per_expert];
      const int64_t n_begin = (task % tiles_per_expert) * kTaskRows;
      expert_tile(x, offsets[expert], offsets[expert + 1], k, weight + expert * n * k, n_begin,
                  std::min(n, n_begin + kTaskRows), n, out);
    }
  });
}

// out [S, N] = per-expert rows [S, K] x weight [E, N, K]^T, experts' rows at offsets [E + 1].
void moe_grouped_linear_op(at::Tensor out, const at::Tensor& rows, const at::Tensor& weight,
                           const at::Tensor& offsets) {
  TORCH_CHECK(rows.device().is_cpu() && rows.dim() == 2 && rows.is_contiguous() &&
                  (rows.scalar_type() == at::kFloat || rows.scalar_type() == at::kBFloat16),
              "rows must be a contiguous float32 or bfloat16 CPU [slots, in_features] tensor");
  TORCH_CHECK(weight.dim() == 3 && weight.is_contiguous() &&
                  weight.scalar_type() == rows.scalar_type() && weight.size(2) == rows.size(1),
              "weight must be a contiguous [experts, out_features, in_features] tensor of rows' "
              "dtype and in_features ", rows.size(1));
  const int64_t num_experts = weight.size(0), n = weight.size(1), k = weight.size(2);
  const int64_t num_slots = rows.size(0);
  TORCH_CHECK(offsets.scalar_type() == at::kLong && offsets.dim() == 1 && offsets.is_contiguous() &&
                  offsets.numel() == num_experts + 1,
              "offsets must be a contiguous int64 tensor of experts + 1 = ", num_experts + 1,
              " slot offsets");
  TORCH_CHECK(out.scalar_type() == rows.scalar_type() && out.is_contiguous() && out.dim() == 2 &&
                  out.size(0) == num_slots && out.size(1) == n,
              "out must be a contiguous [slots, out_features] tensor of rows' dtype");
  const int64_t* offset_data = offsets.data_ptr<int64_t>();
  TORCH_CHECK(offset_data[0] == 0 && offset_data[num_experts] == num_slots,
              "offsets must run from 0 to the number of slots (", num_slots, ")");
  std::vector<int64_t> touched;
  for (int64_t e = 0; e < num_experts; ++e) {
    TORCH_CHECK(offset_data[e] <= offset_data[e + 1], "offsets must not decrease (expert ", e,
                ")");
    if (offset_data[e] < offset_data[e + 1]) touched.push_back(e);
  }
  if (rows.scalar_type() == at::kFloat) {
    grouped_linear(rows.data_ptr<float>(), weight.data_ptr<float>(), offset_data, touched, n, k,
                   out.data_ptr<float>());
    return;
  }
  const auto* w = weight.data_ptr<c10::BFloat16>();
  auto* o = out.data_ptr<c10::BFloat16>();
#ifdef __AVX512BF16__
  grouped_linear(rows.data_ptr<c10::BFloat16>(), w, offset_data, touched, n, k, o);
#else
  const std::vector<float> xf = llmd_cpu::rows_as_float(rows);
  grouped_linear(xf.data(), w, offset_data, touched, n, k, o);
#endif
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmd_cpu, m) {
  m.def("moe_grouped_linear(Tensor(a!) out, Tensor rows, Tensor weight, Tensor offsets) -> ()");
  m.impl("moe_grouped_linear", c10::DispatchKey::CPU, &moe_grouped_linear_op);
}
