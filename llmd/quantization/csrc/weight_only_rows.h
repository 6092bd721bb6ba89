// Shared pieces of llmd's weight-only int8/int4 linears on the CPU: the activation rows
// converted once to float32, and the float32 results written in the output's dtype.
//
// The kernels read every weight byte once for all rows of a call (decode batches of 1-32
// rows), so the activations are made float32 up front: each weight tile then meets the
// rows from L1 with plain FMAs, and fp32 and bf16 callers share one inner loop.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "../../attention/csrc/vec_math.h"

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

namespace llmd_cpu {

typedef int8_t i8x16 __attribute__((vector_size(16), aligned(1)));
typedef uint8_t u8x16 __attribute__((vector_size(16), aligned(1)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

// 16 int8 codes as float32 lanes: vpmovsxbd + vcvtdq2ps with AVX-512 (gcc scalarizes a
// direct int8 -> float conversion), the generic two-step conversion elsewhere.
inline vec16 widen_int8(const int8_t* p) {
#ifdef __AVX512F__
  const __m512 out = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  vec16 v;
  std::memcpy(&v, &out, sizeof(v));
  return v;
#else
  const i8x16 codes = *reinterpret_cast<const i8x16*>(p);
  return __builtin_convertvector(__builtin_convertvector(codes, i32x16), vec16);
#endif
}

// 16 bytes of two 4-bit codes each (code + 8) as float32 lanes: low and high nibbles.
// With AVX-512 each nibble indexes a 16-entry table of the values -8..7 (vpermps reads an
// index's low 4 bits), so a byte's two codes cost a widen, a shift and two lookups: the
// 512-bit ports, not memory, bound this loop at one row.
inline void widen_nibbles(const uint8_t* p, vec16& low, vec16& high) {
#ifdef __AVX512F__
  const __m512 values = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i words = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512 lo = _mm512_permutexvar_ps(words, values);
  const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(words, 4), values);
  std::memcpy(&low, &lo, sizeof(low));
  std::memcpy(&high, &hi, sizeof(high));
#else
  const i32x16 words = __builtin_convertvector(*reinterpret_cast<const u8x16*>(p), i32x16);
  low = __builtin_convertvector((words & 15) - 8, vec16);
  high = __builtin_convertvector((words >> 4) - 8, vec16);
#endif
}

constexpr int kMaxRowTile = 4;  // activation rows per register tile of the kernels

// [M, K] activations (float32 or bfloat16, contiguous rows) as float32, row-major.
inline std::vector<float> rows_as_float(const at::Tensor& x) {
  const int64_t num_rows = x.size(0), k = x.size(1);
  std::vector<float> out(static_cast<size_t>(num_rows * k));
  if (x.scalar_type() == at::kFloat) {
    const float* src = x.data_ptr<float>();
    for (int64_t r = 0; r < num_rows; ++r)
      std::copy(src + r * x.stride(0), src + r * x.stride(0) + k, out.data() + r * k);
  } else {
    const c10::BFloat16* src = x.data_ptr<c10::BFloat16>();
    for (int64_t r = 0; r < num_rows; ++r)
      for (int64_t i = 0; i < k; ++i) out[r * k + i] = to_float(src[r * x.stride(0) + i]);
  }
  return out;
}

// Bias [N] (float32 or bfloat16) as float32, or zeros when absent.
inline std::vector<float> bias_as_float(const c10::optional<at::Tensor>& bias, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  if (!bias.has_value()) return out;
  const at::Tensor b = bias->to(at::kFloat).contiguous();
  std::copy(b.data_ptr<float>(), b.data_ptr<float>() + n, out.data());
  return out;
}

// The checks every weight-only op makes on its activations, output and bias.
inline void check_rows_and_out(const at::Tensor& out, const at::Tensor& x,
                               const c10::optional<at::Tensor>& bias, int64_t n, int64_t k) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.stride(1) == 1 && x.size(1) == k,
              "x must be a CPU [rows, in_features] tensor with contiguous rows, in_features ", k);
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "x must be float32 or bfloat16");
  TORCH_CHECK(out.scalar_type() == x.scalar_type() && out.is_contiguous() && out.dim() == 2 &&
                  out.size(0) == x.size(0) && out.size(1) == n,
              "out must be a contiguous [rows, out_features] tensor of x's dtype, out_features ",
              n);
  TORCH_CHECK(!bias.has_value() || (bias->dim() == 1 && bias->size(0) == n),
              "bias must be [out_features]");
}

// out = result ([M, N] float32, row-major), rounded once to out's dtype.
inline void write_rows(at::Tensor& out, const std::vector<float>& result) {
  if (out.scalar_type() == at::kFloat) {
    std::copy(result.begin(), result.end(), out.data_ptr<float>());
    return;
  }
  c10::BFloat16* dst = out.data_ptr<c10::BFloat16>();
  for (size_t i = 0; i < result.size(); ++i) store_float(dst + i, result[i]);
}

// A finite float's bfloat16 bit pattern, rounded to nearest even (integer ops, so loops of
// it vectorize on AVX2 and AVX-512 alike).
inline uint16_t bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

typedef uint16_t u16x16 __attribute__((vector_size(32), aligned(2)));

// 16 finite floats stored as bfloat16 bit patterns, rounded to nearest even.
inline void store16_bf16(uint16_t* p, vec16 v) {
  word16 bits;
  std::memcpy(&bits, &v, sizeof(bits));
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  *reinterpret_cast<u16x16*>(p) = __builtin_convertvector(bits, u16x16);
}

inline float lane_sum16(vec16 v) { return lane_sum(low_half(v) + high_half(v)); }

#ifdef __AVX512BF16__
// The four sums of four 16-lane vectors, as one vector [sum a, sum b, sum c, sum d]: halves
// added, then three horizontal adds (13 instructions against 4 x 8 for separate reductions,
// which at K = 384 cost a third as much as the dot products themselves).
inline __m128 sum_each(__m512 a, __m512 b, __m512 c, __m512 d) {
  const auto half_sum = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  const __m256 ab = _mm256_hadd_ps(half_sum(a), half_sum(b));
  const __m256 cd = _mm256_hadd_ps(half_sum(c), half_sum(d));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // per 128-bit half: a, b, c, d partial sums
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}
#endif

}  // namespace llmd_cpu
