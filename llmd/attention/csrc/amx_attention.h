// Prefill attention on AMX tiles: bf16 queries over a bf16 cache, 16 query rows at a time.
//
// The vector path spends ~128 fp32 FMAs per query vector and key; a tile multiply does a
// 16 x 16 x 32 bf16 product in one instruction, so prefill chunks (compute-bound) run here
// when the CPU has AMX-BF16 and the OS grants the tile state. Decodes stay on the vector
// path: one query row per item would fill a sixteenth of a tile, and they are bound by
// the bytes of K/V, not by arithmetic.
//
// Per work item (a sequence, a kv head, up to 16 query rows) the context is walked in
// chunks of 32 tokens (two 16-token blocks: one bf16 tile depth). Each chunk's keys and
// values are repacked from the cache layout into the tiles' pair-interleaved (VNNI)
// layout once, then for every query head of the GQA group:
//   S[16, 32] = Q[16, D] K^T[D, 32]            (D/32 tile products per block)
//   online softmax of S * scale over the row's causal prefix, P rounded to bf16
//   O[16, D] = P[16, 32] V[32, D]              (D/16 tile products)
//   acc = acc * correction + O                 (AVX-512, fp32)
// Unwritten (NaN) cache slots never reach a product: masked scores become exp = 0 by
// selection and values past the context are packed as zeros.
#pragma once

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define LLMD_HAVE_AMX 1

#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "vec_math.h"
#include "work_items.h"

namespace llmd_cpu {
namespace amx {

constexpr int64_t kRows = 16;   // query rows per item: a tile's height
constexpr int64_t kChunk = 32;  // tokens per softmax step: a bf16 tile's depth
constexpr int64_t kBlock = 16;  // the cache block size this path reads
constexpr int64_t kMinRows = 4;  // fewer rows run on the vector path (cheaper there)

// Tile registers: 0 = Q slice (A), 1 = P (A), 2-3 = S halves (C), 4-5 = K/V (B), 6-7 = O (C).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Loads the one tile shape this path uses (16 rows x 64 bytes) into all eight registers;
// tile configuration is per thread, so each worker loads it before its first product.
inline void configure_tiles() {
  TileConfig config;
  for (int k = 0; k < 8; ++k) {
    config.colsb[k] = 64;
    config.rows[k] = 16;
  }
  _tile_loadconfig(&config);
}

// Whether the kernel may grant this process the AMX tile state (Linux >= 5.16 asks for
// it explicitly: ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA). Asked once.
inline bool tiles_permitted() {
  static const bool permitted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return permitted;
}

inline std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

// Whether prefill items run on tiles now: permitted by the OS and not switched off.
inline bool in_use() { return enabled_flag().load() && tiles_permitted(); }

// Per-thread scratch, laid out for tile loads (64-byte rows).
struct Scratch {
  int64_t group_size = 0, head_dim = 0;
  std::vector<uint8_t> storage;
  c10::BFloat16* q = nullptr;    // [group][16][D] bf16, rows past the item's zeroed
  c10::BFloat16* k = nullptr;    // [2 blocks][D/2][16][2] bf16 (VNNI)
  c10::BFloat16* v = nullptr;    // [16 token pairs][D][2] bf16 (VNNI)
  float* s = nullptr;            // [16][32] scores
  c10::BFloat16* p = nullptr;    // [16][32] probabilities
  float* o = nullptr;            // [16][D] this chunk's P V
  float* acc = nullptr;          // [group][16][D]
  float* row_max = nullptr;      // [group][16]
  float* row_sum = nullptr;      // [group][16]

  Scratch(int64_t group, int64_t dim) : group_size(group), head_dim(dim) {
    const int64_t sizes[] = {group * kRows * dim * 2, 2 * dim * kBlock * 2, kChunk * dim * 2,
                             kRows * kChunk * 4,       kRows * kChunk * 2,   kRows * dim * 4,
                             group * kRows * dim * 4,  group * kRows * 4,    group * kRows * 4};
    int64_t total = 64;
    for (int64_t size : sizes) total += (size + 63) / 64 * 64;
    storage.resize(total);
    uint8_t* at = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
    uint8_t* parts[9];
    for (int k = 0; k < 9; ++k) {
      parts[k] = at;
      at += (sizes[k] + 63) / 64 * 64;
    }
    q = reinterpret_cast<c10::BFloat16*>(parts[0]);
    k = reinterpret_cast<c10::BFloat16*>(parts[1]);
    v = reinterpret_cast<c10::BFloat16*>(parts[2]);
    s = reinterpret_cast<float*>(parts[3]);
    p = reinterpret_cast<c10::BFloat16*>(parts[4]);
    o = reinterpret_cast<float*>(parts[5]);
    acc = reinterpret_cast<float*>(parts[6]);
    row_max = reinterpret_cast<float*>(parts[7]);
    row_sum = reinterpret_cast<float*>(parts[8]);
  }
};

// Interleaves two rows of 32 bf16 into 32 pairs: lanes 2t, 2t+1 = a[t], b[t] (t < 16 for
// `low`, 16..31 for the high half).
inline __m512i interleave_low(__m512i a, __m512i b) {
  const __m512i index = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                         40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                         1, 32, 0);
  return _mm512_permutex2var_epi16(a, index, b);
}
inline __m512i interleave_high(__m512i a, __m512i b) {
  const __m512i index = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57,
                                         25, 56, 24, 55, 23, 54, 22, 53, 21, 52, 20, 51, 19,
                                         50, 18, 49, 17, 48, 16);
  return _mm512_permutex2var_epi16(a, index, b);
}

// Transposed keys of one block [D][16] -> VNNI [D/2][16 tokens][2 dims].
template <int64_t D>
inline void pack_keys(const c10::BFloat16* __restrict__ kb, c10::BFloat16* __restrict__ dst) {
  // lane 2t <- row d's token t (word t), lane 2t+1 <- row d+1's (word 16 + t)
  const __m512i index = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17,
                                         1, 16, 0);
  for (int64_t d = 0; d < D; d += 2) {  // rows d and d+1 are adjacent: one 64-byte load
    const __m512i rows = _mm512_loadu_si512(kb + d * kBlock);
    _mm512_storeu_si512(dst + d * kBlock, _mm512_permutexvar_epi16(index, rows));
  }
}

// Token-major values of `count` tokens (the rest zero) -> VNNI rows [token pair][D][2].
template <int64_t D>
inline void pack_values(const c10::BFloat16* __restrict__ vb, int64_t count,
                        c10::BFloat16* __restrict__ dst) {
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t t = 0; t < kBlock; t += 2) {
    c10::BFloat16* out = dst + t * D;  // token pair t/2 holds 2 x D values
    for (int64_t d = 0; d < D; d += 32) {
      const __m512i a = t < count ? _mm512_loadu_si512(vb + t * D + d) : zero;
      const __m512i b = t + 1 < count ? _mm512_loadu_si512(vb + (t + 1) * D + d) : zero;
      _mm512_storeu_si512(out + 2 * d, interleave_low(a, b));
      _mm512_storeu_si512(out + 2 * d + 32, interleave_high(a, b));
    }
  }
}

// exp(x) for x <= 0 in 16 lanes: 2^n * 2^f with f in [-1/2, 1/2] and a degree-5
// Taylor polynomial (relative error under 3e-6, far below the bf16 rounding the
// probabilities get);
// scalef applies 2^n, so inputs far below zero give 0, never a wrong power.
inline __m512 exp_nonpositive16(__m512 x) {
  const __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)),
                                 _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);  // [-1/2, 1/2]
  __m512 p = _mm512_set1_ps(1.3333558146e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108665e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650696e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718056e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The lanes of a 32-token chunk row that its causal prefix covers (low, high halves).
inline void valid_lanes(int64_t num_valid, __mmask16& low, __mmask16& high) {
  const uint32_t n = static_cast<uint32_t>(std::clamp<int64_t>(num_valid, 0, kChunk));
  low = _cvtu32_mask16(n >= 16 ? 0xFFFFu : (1u << n) - 1);
  high = _cvtu32_mask16(n >= 32 ? 0xFFFFu : n <= 16 ? 0u : (1u << (n - 16)) - 1);
}

// The online-softmax step of one head over one chunk: scores s [16][32] (unscaled) become
// bf16 probabilities p [16][32] (0 wherever a row's causal prefix or the item ends), the
// rows' running max and sum move on, and correction[r] says how to rescale row r's
// accumulator (0 before its first token). Row maxima first, then one vector exp for all
// 16 corrections.
inline void softmax_chunk(const WorkItem& item, int64_t chunk, int64_t num_tokens, float scale,
                          const float* s, c10::BFloat16* p, float* row_max, float* row_sum,
                          float* correction) {
  const __m512 minus = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 scale_v = _mm512_set1_ps(scale);
  alignas(64) float chunk_max[kRows], chunk_sum[kRows];
  __mmask16 low[kRows], high[kRows];
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t num_valid =
        r < item.num_rows ? std::min(num_tokens, item.first_position + r + 1 - chunk) : 0;
    valid_lanes(num_valid, low[r], high[r]);
    const __m512 x0 = _mm512_mask_mul_ps(minus, low[r], _mm512_loadu_ps(s + r * kChunk), scale_v);
    const __m512 x1 =
        _mm512_mask_mul_ps(minus, high[r], _mm512_loadu_ps(s + r * kChunk + 16), scale_v);
    chunk_max[r] = _mm512_reduce_max_ps(_mm512_max_ps(x0, x1));
  }
  const __m512 old_max = _mm512_loadu_ps(row_max);
  const __m512 new_max = _mm512_max_ps(old_max, _mm512_load_ps(chunk_max));
  _mm512_storeu_ps(row_max, new_max);
  // Rows without a finite max yet (no token seen) keep a zero accumulator: correction 0.
  const __mmask16 has_max = _mm512_cmp_ps_mask(old_max, minus, _CMP_NEQ_OQ);
  const __m512 corr = _mm512_maskz_mov_ps(has_max, exp_nonpositive16(_mm512_sub_ps(old_max, new_max)));
  _mm512_store_ps(correction, corr);
  for (int64_t r = 0; r < kRows; ++r) {
    const __m512 m = _mm512_set1_ps(row_max[r]);
    const __m512 x0 = _mm512_mul_ps(_mm512_loadu_ps(s + r * kChunk), scale_v);
    const __m512 x1 = _mm512_mul_ps(_mm512_loadu_ps(s + r * kChunk + 16), scale_v);
    // Masked lanes (past the prefix, NaN keys) are exactly 0 by selection.
    const __m512 p0 = _mm512_maskz_mov_ps(low[r], exp_nonpositive16(_mm512_sub_ps(x0, m)));
    const __m512 p1 = _mm512_maskz_mov_ps(high[r], exp_nonpositive16(_mm512_sub_ps(x1, m)));
    chunk_sum[r] = _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
    const __m512bh packed = _mm512_cvtne2ps_pbh(p1, p0);  // lanes 0-15 from p0
    std::memcpy(p + r * kChunk, &packed, sizeof(packed));
  }
  _mm512_storeu_ps(row_sum, _mm512_fmadd_ps(_mm512_loadu_ps(row_sum), corr,
                                            _mm512_load_ps(chunk_sum)));
}

// One item's rows against its causal context; out rows are written in bf16.
template <int64_t D>
void attend_item(const WorkItem& item, const Shapes& s, const c10::BFloat16* query,
                 c10::BFloat16* out, const c10::BFloat16* k_cache,
                 const c10::BFloat16* v_cache, const int32_t* block_table, float scale,
                 float out_scale, Scratch& w) {
  static_assert(D % 32 == 0, "head_dim must fill whole tile rows");
  const int64_t group = s.group_size, rows = item.num_rows;
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (int64_t g = 0; g < group; ++g) {
    const int64_t head = item.kv_head * group + g;
    c10::BFloat16* q = w.q + g * kRows * D;
    for (int64_t r = 0; r < kRows; ++r) {
      if (r < rows) {
        std::memcpy(q + r * D, query + (item.row_begin + r) * s.q_token_stride + head * D,
                    D * sizeof(c10::BFloat16));
      } else {
        std::memset(q + r * D, 0, D * sizeof(c10::BFloat16));
      }
    }
  }
  std::fill(w.acc, w.acc + group * kRows * D, 0.0f);
  std::fill(w.row_max, w.row_max + group * kRows, minus_inf);
  std::fill(w.row_sum, w.row_sum + group * kRows, 0.0f);

  const int64_t context_end = item.first_position + rows;  // tokens the last row sees
  const int64_t head_block = s.num_kv_heads * D * kBlock;  // elements per cache block
  alignas(64) float correction[kRows];
  for (int64_t chunk = 0; chunk < context_end; chunk += kChunk) {
    const int64_t num_tokens = std::min(kChunk, context_end - chunk);
    const bool has_second = num_tokens > kBlock;
    for (int64_t half = 0; half < (has_second ? 2 : 1); ++half) {
      const int64_t block_id = block_table[(chunk >> 4) + half];
      const int64_t offset = block_id * head_block + item.kv_head * D * kBlock;
      pack_keys<D>(k_cache + offset, w.k + half * D * kBlock);
      pack_values<D>(v_cache + offset, std::min(kBlock, num_tokens - half * kBlock),
                     w.v + half * kBlock * D);
    }
    if (!has_second) std::memset(w.v + kBlock * D, 0, kBlock * D * sizeof(c10::BFloat16));

    for (int64_t g = 0; g < group; ++g) {
      const c10::BFloat16* q = w.q + g * kRows * D;
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t c = 0; c < D; c += 32) {
        _tile_loadd(0, q + c, D * 2);
        _tile_loadd(4, w.k + c * kBlock, 64);
        _tile_dpbf16ps(2, 0, 4);
        if (has_second) {
          _tile_loadd(5, w.k + D * kBlock + c * kBlock, 64);
          _tile_dpbf16ps(3, 0, 5);
        }
      }
      _tile_stored(2, w.s, kChunk * 4);
      _tile_stored(3, w.s + kBlock, kChunk * 4);

      softmax_chunk(item, chunk, num_tokens, scale, w.s, w.p, w.row_max + g * kRows,
                    w.row_sum + g * kRows, correction);
      _tile_loadd(1, w.p, kChunk * 2);
      for (int64_t c = 0; c < D; c += 32) {  // two 16-column slices of O per pass
        _tile_zero(6);
        _tile_zero(7);
        _tile_loadd(4, w.v + 2 * c, D * 4);
        _tile_loadd(5, w.v + 2 * c + 32, D * 4);
        _tile_dpbf16ps(6, 1, 4);
        _tile_dpbf16ps(7, 1, 5);
        _tile_stored(6, w.o + c, D * 4);
        _tile_stored(7, w.o + c + 16, D * 4);
      }
      float* acc = w.acc + g * kRows * D;
      for (int64_t r = 0; r < rows; ++r) {
        const __m512 corr = _mm512_set1_ps(correction[r]);
        for (int64_t d = 0; d < D; d += 16) {
          const __m512 a = _mm512_loadu_ps(acc + r * D + d);
          _mm512_storeu_ps(acc + r * D + d,
                           _mm512_fmadd_ps(a, corr, _mm512_loadu_ps(w.o + r * D + d)));
        }
      }
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    const int64_t head = item.kv_head * group + g;
    const float* acc = w.acc + g * kRows * D;
    for (int64_t r = 0; r < rows; ++r) {
      c10::BFloat16* dst = out + ((item.row_begin + r) * s.num_heads + head) * D;
      const float inv = out_scale / w.row_sum[g * kRows + r];
      for (int64_t d = 0; d < D; ++d) store_float(dst + d, acc[r * D + d] * inv);
    }
  }
}

}  // namespace amx
}  // namespace llmd_cpu

#endif  // AMX-BF16
