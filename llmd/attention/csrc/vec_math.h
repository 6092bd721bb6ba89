// Vector helpers of the CPU paged-attention op: bf16/fp32 loads into fp32 lanes, a
// vectorized exp and the online-softmax step over one block's scores.
//
// The vectors are gcc's generic vector types: 8 lanes are one ymm register with AVX2 or
// AVX-512; 16 lanes are one zmm register with AVX-512 and two ymm registers with AVX2, so
// the same source builds (-march=native) and runs on either.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX2__) && defined(__F16C__)
#define LLMD_FP8_BY_F16C 1
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace llmd_cpu {

inline float to_float(float x) { return x; }
inline void store_float(float* p, float x) { *p = x; }
inline void store_float(c10::BFloat16* p, float x) { *p = c10::BFloat16(x); }  // nearest-even
inline float to_float(c10::BFloat16 x) {
  uint32_t bits = static_cast<uint32_t>(x.x) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// fp8 e4m3 (the KV cache's `fp8`) read as fp16 bit patterns: the byte's exponent and
// mantissa shifted into an fp16 (5-bit exponent, bias 15) give its value times 2^-8, and
// its subnormals land on fp16 subnormals, which the hardware converts exactly (F16C). The
// kernels fold the 2^8 into their scales (kFp8LoadScale), so a load is a shift and a
// convert (F16C, on every AVX2 CPU). NaN (0x7F) reads as 480: NaN slots lie past every context and are never used.
constexpr float kFp8LoadScale = 256.0f;
inline float to_float(c10::Float8_e4m3fn x) {
  return static_cast<float>(x) / kFp8LoadScale;  // the kernels' scaled domain
}
template <typename T>
constexpr float load_scale() {
  return std::is_same_v<T, c10::Float8_e4m3fn> ? kFp8LoadScale : 1.0f;
}

// 8 floats as one generic vector: a ymm register with AVX2 or AVX-512 (-march=native).
typedef float vec8 __attribute__((vector_size(32)));
typedef float vec8u __attribute__((vector_size(32), aligned(4)));
typedef uint16_t half8 __attribute__((vector_size(16), aligned(2)));
typedef uint32_t word8 __attribute__((vector_size(32)));

inline vec8 load8(const float* p) { return *reinterpret_cast<const vec8u*>(p); }
inline vec8 load8(const c10::BFloat16* p) {
  const half8 raw = *reinterpret_cast<const half8*>(p);
  const word8 bits = __builtin_convertvector(raw, word8) << 16;
  vec8 out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}
inline void store8(float* p, vec8 v) { *reinterpret_cast<vec8u*>(p) = v; }
#ifdef LLMD_FP8_BY_F16C
// fp8 bytes -> the fp16 bit patterns described above (16 lanes of 16 bits): sign-extended
// and shifted by 7, the sign lands on bit 15 (and a copy on bit 14, cleared), exponent and
// mantissa on bits 13..7.
inline __m256i fp8_as_fp16_bits(__m128i bytes) {
  const __m256i words = _mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7);
  return _mm256_and_si256(words, _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
}
inline vec8 load8(const c10::Float8_e4m3fn* p) {
  const __m256i bits = fp8_as_fp16_bits(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256 out = _mm256_cvtph_ps(_mm256_castsi256_si128(bits));  // F16C
  vec8 v;
  std::memcpy(&v, &out, sizeof(v));
  return v;
}
#else  // no F16C (or not x86): one element at a time, the same values
inline vec8 load8(const c10::Float8_e4m3fn* p) {
  vec8 v;
  for (int k = 0; k < 8; ++k) v[k] = to_float(p[k]);
  return v;
}
#endif

typedef int32_t int8v __attribute__((vector_size(32)));
constexpr vec8 kLaneIndex = {0, 1, 2, 3, 4, 5, 6, 7};

// exp(x) lane-wise for x <= 0 (Cephes-style range reduction and polynomial, rel. error
// ~1e-7); inputs below -87 give ~1e-38, never a denormal. V is a float vector, I the
// int32 vector of the same lane count.
template <typename V, typename I>
inline V exp_lanes(V x) {
  x = x < -87.0f ? V{} - 87.0f : x;
  // Round to nearest by the 1.5 * 2^23 trick.
  const V n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const V r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
  V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I bits = (__builtin_convertvector(n, I) + 127) << 23;
  V scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline vec8 exp8(vec8 x) { return exp_lanes<vec8, int8v>(x); }

inline float exp_scalar(float x) { return exp8(vec8{} + x)[0]; }

inline float lane_max(vec8 v) {
  float out = v[0];
  for (int k = 1; k < 8; ++k) out = std::max(out, v[k]);
  return out;
}

inline float lane_sum(vec8 v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

typedef float vec16 __attribute__((vector_size(64)));
typedef float vec16u __attribute__((vector_size(64), aligned(4)));
typedef uint16_t half16 __attribute__((vector_size(32), aligned(2)));
typedef uint32_t word16 __attribute__((vector_size(64)));

inline vec16 load16(const float* p) { return *reinterpret_cast<const vec16u*>(p); }
inline vec16 load16(const c10::BFloat16* p) {
#ifdef __AVX512F__
  // One widening load and a shift (gcc splits the generic conversion into 8-lane halves).
  const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512 out = _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
  vec16 v;
  std::memcpy(&v, &out, sizeof(v));
  return v;
#else
  const half16 raw = *reinterpret_cast<const half16*>(p);
  const word16 bits = __builtin_convertvector(raw, word16) << 16;
  vec16 out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
#endif
}
inline void store16(float* p, vec16 v) { *reinterpret_cast<vec16u*>(p) = v; }
#ifdef LLMD_FP8_BY_F16C
inline vec16 load16(const c10::Float8_e4m3fn* p) {
  const __m256i bits = fp8_as_fp16_bits(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  vec16 v;
#ifdef __AVX512F__
  const __m512 out = _mm512_cvtph_ps(bits);
  std::memcpy(&v, &out, sizeof(v));
#else  // AVX2 + F16C: two 8-lane conversions
  const __m256 low = _mm256_cvtph_ps(_mm256_castsi256_si128(bits));
  const __m256 high = _mm256_cvtph_ps(_mm256_extracti128_si256(bits, 1));
  std::memcpy(&v, &low, sizeof(low));
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof(low), &high, sizeof(high));
#endif
  return v;
}
#else
inline vec16 load16(const c10::Float8_e4m3fn* p) {
  vec16 v;
  for (int k = 0; k < 16; ++k) v[k] = to_float(p[k]);
  return v;
}
#endif

typedef int32_t int16v __attribute__((vector_size(64)));
inline vec16 exp16(vec16 x) { return exp_lanes<vec16, int16v>(x); }

inline vec8 low_half(vec16 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline vec8 high_half(vec16 v) {
  return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
}
constexpr vec16 kLaneIndex16 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// Online-softmax step over one span's scores[0, num_valid): returns the span's sum of
// exp(score - new_max) and leaves those probabilities in scores. Reads 16 lanes at a time
// (within the row's padding); lanes past num_valid are masked by selection, so NaN
// padding never propagates.
inline float block_probs(float* __restrict__ scores, int64_t num_valid, float& row_max) {
  const vec16 minus_inf = vec16{} - std::numeric_limits<float>::infinity();
  vec16 maxes = minus_inf;
  for (int64_t t = 0; t < num_valid; t += 16) {
    const vec16 lane = kLaneIndex16 + static_cast<float>(t);
    const vec16 x = load16(scores + t);
    maxes = lane < static_cast<float>(num_valid) ? (x > maxes ? x : maxes) : maxes;
  }
  const vec8 folded = low_half(maxes) > high_half(maxes) ? low_half(maxes) : high_half(maxes);
  const float new_max = std::max(row_max, lane_max(folded));
  vec16 sums = {};
  for (int64_t t = 0; t < num_valid; t += 16) {
    const vec16 lane = kLaneIndex16 + static_cast<float>(t);
    const vec16 probs = exp16(load16(scores + t) - new_max);
    const vec16 kept = lane < static_cast<float>(num_valid) ? probs : vec16{};
    store16(scores + t, kept);
    sums += kept;
  }
  row_max = new_max;
  return lane_sum(low_half(sums) + high_half(sums));
}

}  // namespace llmd_cpu
