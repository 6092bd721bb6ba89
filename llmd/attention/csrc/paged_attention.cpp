// CPU paged attention over llmd's CPU KV layout, with the K/V store of the step.
//
// Layout (per layer): k_cache [num_blocks, num_kv_heads, head_dim, block_size] and
// v_cache [num_blocks, num_kv_heads, block_size, head_dim]. Keys are stored transposed so
// that q.K over a block's tokens is a vector FMA across block_size lanes (no horizontal
// sums); values stay token-major so p.V is a vector FMA across head_dim lanes.
//
// One work item is (sequence, kv head, tile of query rows): a decode is a tile of one row.
// Each item runs an online softmax over its sequence's blocks, read through the block
// table, for all the query heads that share the kv head (GQA). Items are handed out to
// at::parallel_for's threads through an atomic counter, longest first.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "amx_attention.h"
#include "vec_math.h"
#include "work_items.h"

namespace {

using namespace llmd_cpu;  // NOLINT: the op's own helpers

constexpr int64_t kTileRows = 8;  // query rows per prefill work item
constexpr int64_t kAmxTileRows = 16;  // ... when they run on AMX tiles: one tile's height

// Whether this call's prefill items run on AMX tiles: bf16 queries and cache, 16-token
// blocks, a head_dim the tile path is built for, and tiles usable in this process.
bool tiles_apply(const at::Tensor& query, const at::Tensor& k_cache, const Shapes& s) {
#ifdef LLMD_HAVE_AMX
  return query.scalar_type() == at::kBFloat16 && k_cache.scalar_type() == at::kBFloat16 &&
         s.block_size == 16 && (s.head_dim == 64 || s.head_dim == 128) && amx::in_use();
#else
  (void)query, (void)k_cache, (void)s;
  return false;
#endif
}

// Switches the AMX tile path on or off (tests, benchmarks); returns whether it is in use.
bool set_amx_enabled(bool enabled) {
#ifdef LLMD_HAVE_AMX
  amx::enabled_flag().store(enabled);
  return amx::in_use();
#else
  (void)enabled;
  return false;
#endif
}

// Blocks per softmax span: the scores of up to this many blocks are computed before one
// online-softmax step over all of them, which pays the step's reductions, exp of the
// correction and rescaling of the accumulators once per span instead of once per block.
constexpr int64_t kSpanBlocks = 4;

// Scores rows hold a span of blocks, padded to whole 16-lane vectors so block_probs never
// touches a neighbour.
inline int64_t score_stride(int64_t block_size) {
  return (kSpanBlocks * block_size + 15) / 16 * 16;
}

// scores[j, 0:16] = q_j . K[:, t] for NQ queries over one 16-token block of transposed keys
// [D, 16]: each key row is loaded once for the NQ queries, whose sums stay in registers.
template <typename T, int64_t D, int64_t NQ>
inline void block_scores_fixed(const float* __restrict__ q, const T* __restrict__ kb,
                               float* __restrict__ scores, int64_t stride) {
  // NA partial sums per query over interleaved d: at least 8 independent FMA chains, so
  // the FMA latency (4 cycles) does not serialise the few queries of a decode.
  constexpr int64_t NA = NQ >= 4 ? 2 : 4;
  static_assert(D % NA == 0, "head_dim splits into NA interleaved sums");
  vec16 sums[NA][NQ] = {};
  for (int64_t d = 0; d < D; d += NA) {
    for (int64_t a = 0; a < NA; ++a) {
      const vec16 k_row = load16(kb + (d + a) * 16);
      for (int64_t j = 0; j < NQ; ++j) sums[a][j] += q[j * D + d + a] * k_row;
    }
  }
  for (int64_t j = 0; j < NQ; ++j) {
    vec16 total = sums[0][j];
    for (int64_t a = 1; a < NA; ++a) total += sums[a][j];
    store16(scores + j * stride, total);
  }
}

// scores[i, 0:bs] for queries [0, num_q): fixed-size groups of up to 4 queries when the
// block size and head dim are compile-time constants, generic loops otherwise.
template <typename T, int64_t BS, int64_t D>
inline void block_scores(const float* __restrict__ q, const T* __restrict__ kb,
                         float* __restrict__ scores, int64_t num_q, int64_t bs,
                         int64_t head_dim, int64_t stride) {
  if constexpr (BS == 16 && D > 0) {
    int64_t i = 0;
    for (; i + 4 <= num_q; i += 4)
      block_scores_fixed<T, D, 4>(q + i * D, kb, scores + i * stride, stride);
    float* sc = scores + i * stride;
    switch (num_q - i) {
      case 3: return block_scores_fixed<T, D, 3>(q + i * D, kb, sc, stride);
      case 2: return block_scores_fixed<T, D, 2>(q + i * D, kb, sc, stride);
      case 1: return block_scores_fixed<T, D, 1>(q + i * D, kb, sc, stride);
      default: return;
    }
  } else {
    for (int64_t i = 0; i < num_q; ++i) {
      float* __restrict__ sc = scores + i * stride;
      for (int64_t t = 0; t < bs; ++t) sc[t] = 0.0f;
      for (int64_t d = 0; d < head_dim; ++d) {
        const float qd = q[i * head_dim + d];
        const T* __restrict__ krow = kb + d * bs;
#pragma omp simd
        for (int64_t t = 0; t < bs; ++t) sc[t] += qd * to_float(krow[t]);
      }
    }
  }
}

// acc[0:head_dim] += sum_t probs[t] * V[t, :] over one block's token-major values, for
// head dims that are not a multiple of 64 (runtime-sized loops).
template <typename T>
inline void block_values(const float* __restrict__ probs, const T* __restrict__ vb,
                         float* __restrict__ acc, int64_t num_valid, int64_t head_dim) {
  for (int64_t t = 0; t < num_valid; ++t) {
    const float p = probs[t];
    const T* __restrict__ vrow = vb + t * head_dim;
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) acc[d] += p * to_float(vrow[d]);
  }
}

// acc[j, 0:D] += sum_t probs[j, t] * V[t, :] for NQ query rows that see the same
// num_valid tokens of one block: each value row is loaded once for all NQ rows, whose 64-lane
// chunks of acc stay in registers.
template <typename T, int64_t D, int64_t NQ>
inline void block_values_rows(const float* __restrict__ probs, int64_t probs_stride,
                              const T* __restrict__ vb, float* __restrict__ acc,
                              int64_t num_valid) {
  static_assert(D % 64 == 0, "64-lane chunks of head_dim");
  for (int64_t chunk = 0; chunk < D; chunk += 64) {
    vec16 sums[NQ][4];
    for (int64_t j = 0; j < NQ; ++j)
      for (int64_t k = 0; k < 4; ++k) sums[j][k] = load16(acc + j * D + chunk + 16 * k);
    for (int64_t t = 0; t < num_valid; ++t) {
      const T* __restrict__ vrow = vb + t * D + chunk;
      const vec16 v0 = load16(vrow), v1 = load16(vrow + 16), v2 = load16(vrow + 32),
                  v3 = load16(vrow + 48);
      for (int64_t j = 0; j < NQ; ++j) {
        const float p = probs[j * probs_stride + t];
        sums[j][0] += p * v0;
        sums[j][1] += p * v1;
        sums[j][2] += p * v2;
        sums[j][3] += p * v3;
      }
    }
    for (int64_t j = 0; j < NQ; ++j)
      for (int64_t k = 0; k < 4; ++k) store16(acc + j * D + chunk + 16 * k, sums[j][k]);
  }
}

// Runs block_values_rows over `count` consecutive rows (any count) in groups of up to 4.
template <typename T, int64_t D>
inline void block_values_run(const float* probs, int64_t probs_stride, const T* vb, float* acc,
                             int64_t num_valid, int64_t count) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4)
    block_values_rows<T, D, 4>(probs + j * probs_stride, probs_stride, vb, acc + j * D,
                               num_valid);
  const float* p = probs + j * probs_stride;
  float* a = acc + j * D;
  switch (count - j) {
    case 3: return block_values_rows<T, D, 3>(p, probs_stride, vb, a, num_valid);
    case 2: return block_values_rows<T, D, 2>(p, probs_stride, vb, a, num_valid);
    case 1: return block_values_rows<T, D, 1>(p, probs_stride, vb, a, num_valid);
    default: return;
  }
}

// Attends one work item: rows x group_size query vectors against the sequence's blocks.
// Queries (Q: fp32 or bf16) are scaled into fp32 scratch; outputs are rounded to Q once.
template <typename T, typename Q, int64_t BS, int64_t D>
void attend_item(const WorkItem& item, const Shapes& s, const Q* query, Q* out,
                 const T* k_cache, const T* v_cache, const int32_t* block_table,
                 Scales scales, float* scratch) {
  const int64_t head_dim = D > 0 ? D : s.head_dim;
  const int64_t bs = BS > 0 ? BS : s.block_size;
  const int64_t num_q = item.num_rows * s.group_size;
  const int64_t stride = score_stride(bs);
  // scratch: q [num_q, head_dim], acc [num_q, head_dim], scores [num_q, stride], max, sum.
  float* q = scratch;
  float* acc = q + num_q * head_dim;
  float* scores = acc + num_q * head_dim;
  float* row_max = scores + num_q * stride;
  float* row_sum = row_max + num_q;
  for (int64_t r = 0; r < item.num_rows; ++r) {
    for (int64_t g = 0; g < s.group_size; ++g) {
      const int64_t head = item.kv_head * s.group_size + g;
      const Q* src = query + (item.row_begin + r) * s.q_token_stride + head * head_dim;
      float* dst = q + (r * s.group_size + g) * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) dst[d] = to_float(src[d]) * scales.query;
    }
  }
  std::fill(acc, acc + num_q * head_dim, 0.0f);
  std::fill(row_max, row_max + num_q, -std::numeric_limits<float>::infinity());
  std::fill(row_sum, row_sum + num_q, 0.0f);

  const int64_t last_position = item.first_position + item.num_rows - 1;
  const int64_t num_blocks = last_position / bs + 1;
  const int64_t block_elements = head_dim * bs;
  for (int64_t span = 0; span < num_blocks; span += kSpanBlocks) {
    const int64_t span_blocks = std::min(kSpanBlocks, num_blocks - span);
    const int64_t span_start = span * bs;
    // Lanes at or past a row's num_valid (padding, NaN slots) are computed but never read.
    for (int64_t k = 0; k < span_blocks; ++k) {
      const int64_t b = span + k;
      if (b + 1 < num_blocks) {  // blocks are scattered: the hardware prefetcher cannot guess
        const int64_t next = block_table[b + 1] * s.num_kv_heads + item.kv_head;
        const char* next_k = reinterpret_cast<const char*>(k_cache + next * block_elements);
        const char* next_v = reinterpret_cast<const char*>(v_cache + next * block_elements);
        for (int64_t offset = 0; offset < block_elements * int64_t(sizeof(T)); offset += 64) {
          __builtin_prefetch(next_k + offset);
          __builtin_prefetch(next_v + offset);
        }
      }
      const T* kb = k_cache + (block_table[b] * s.num_kv_heads + item.kv_head) * block_elements;
      block_scores<T, BS, D>(q, kb, scores + k * bs, num_q, bs, head_dim, stride);
    }
    // The group_size heads of one query row see the same tokens: one run of rows each.
    for (int64_t r = 0; r < item.num_rows; ++r) {
      const int64_t position = item.first_position + r;
      const int64_t span_valid = std::min(span_blocks * bs, position + 1 - span_start);
      if (span_valid <= 0) continue;  // causal: this row sees nothing in this span
      const int64_t first = r * s.group_size;
      for (int64_t i = first; i < first + s.group_size; ++i) {
        float* sc = scores + i * stride;
        const float old_max = row_max[i];
        const float span_sum = block_probs(sc, span_valid, row_max[i]);
        if (row_max[i] != old_max) {
          const float correction = exp_scalar(old_max - row_max[i]);
          float* ai = acc + i * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) ai[d] *= correction;
          row_sum[i] *= correction;
        }
        row_sum[i] += span_sum;
      }
      for (int64_t k = 0; k * bs < span_valid; ++k) {
        const int64_t num_valid = std::min(bs, span_valid - k * bs);
        const T* vb = v_cache + (block_table[span + k] * s.num_kv_heads + item.kv_head) * block_elements;
        const float* probs = scores + first * stride + k * bs;
        if constexpr (D > 0 && D % 64 == 0) {
          block_values_run<T, D>(probs, stride, vb, acc + first * head_dim, num_valid,
                                 s.group_size);
        } else {
          for (int64_t i = 0; i < s.group_size; ++i)
            block_values<T>(probs + i * stride, vb, acc + (first + i) * head_dim, num_valid,
                            head_dim);
        }
      }
    }
  }
  for (int64_t r = 0; r < item.num_rows; ++r) {
    for (int64_t g = 0; g < s.group_size; ++g) {
      const int64_t i = r * s.group_size + g;
      const int64_t head = item.kv_head * s.group_size + g;
      Q* dst = out + ((item.row_begin + r) * s.num_heads + head) * head_dim;
      const float inv = scales.out / row_sum[i];
      for (int64_t d = 0; d < head_dim; ++d) store_float(dst + d, acc[i * head_dim + d] * inv);
    }
  }
}

// Largest finite fp8 e4m3 value: stores saturate here (a plain conversion would give NaN).
constexpr float kFp8Max = 448.0f;

// The cache element for one new K/V value (S: the step's dtype, T: the cache's): the same
// value when they match, else x / scale rounded to fp8 (nearest even, saturating).
template <typename S, typename T>
inline T cache_element(S x, float scale) {
  if constexpr (std::is_same_v<S, T>) {
    return x;
  } else {
    const float scaled = to_float(x) / scale;
    return T(std::clamp(scaled, -kFp8Max, kFp8Max));  // NaN stays NaN
  }
}

template <typename S, typename T>
void store_kv(const at::Tensor& key, const at::Tensor& value, const at::Tensor& k_cache,
              const at::Tensor& v_cache, const at::Tensor& slot_mapping, const Shapes& s,
              float k_scale, float v_scale) {
  const S* k_src = static_cast<const S*>(key.data_ptr());
  const S* v_src = static_cast<const S*>(value.data_ptr());
  T* k_dst = static_cast<T*>(k_cache.data_ptr());
  T* v_dst = static_cast<T*>(v_cache.data_ptr());
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  const int64_t num_slots = k_cache.size(0) * s.block_size;
  for (int64_t token = 0; token < slot_mapping.size(0); ++token) {
    const int64_t slot = slots[token];
    if (slot < 0) continue;  // a padding token: nothing to store
    TORCH_CHECK(slot < num_slots, "slot ", slot, " is outside the cache");
    const int64_t block_id = slot / s.block_size, offset = slot % s.block_size;
    for (int64_t h = 0; h < s.num_kv_heads; ++h) {
      const int64_t base = (block_id * s.num_kv_heads + h) * s.head_dim * s.block_size;
      const S* k_row = k_src + token * s.k_token_stride + h * s.head_dim;
      const S* v_row = v_src + token * s.v_token_stride + h * s.head_dim;
      for (int64_t d = 0; d < s.head_dim; ++d) {
        k_dst[base + d * s.block_size + offset] = cache_element<S, T>(k_row[d], k_scale);
        v_dst[base + offset * s.head_dim + d] = cache_element<S, T>(v_row[d], v_scale);
      }
    }
  }
}

// Stores the step's K/V: same-dtype caches copy, an fp8 cache quantizes fp32 or bf16 K/V.
void store_step_kv(const at::Tensor& key, const at::Tensor& value, const at::Tensor& k_cache,
                   const at::Tensor& v_cache, const at::Tensor& slot_mapping, const Shapes& s,
                   double k_scale, double v_scale) {
  const float ks = static_cast<float>(k_scale), vs = static_cast<float>(v_scale);
  const auto source = key.scalar_type(), cache = k_cache.scalar_type();
  using Fp8 = c10::Float8_e4m3fn;
  using Bf16 = c10::BFloat16;
  if (cache == at::kFloat) return store_kv<float, float>(key, value, k_cache, v_cache, slot_mapping, s, ks, vs);
  if (cache == at::kBFloat16) return store_kv<Bf16, Bf16>(key, value, k_cache, v_cache, slot_mapping, s, ks, vs);
  if (source == at::kFloat) return store_kv<float, Fp8>(key, value, k_cache, v_cache, slot_mapping, s, ks, vs);
  if (source == at::kBFloat16) return store_kv<Bf16, Fp8>(key, value, k_cache, v_cache, slot_mapping, s, ks, vs);
  store_kv<Fp8, Fp8>(key, value, k_cache, v_cache, slot_mapping, s, ks, vs);
}

template <typename T, typename Q, int64_t BS, int64_t D>
void run_items(const std::vector<WorkItem>& items, const Shapes& s, const Q* query,
               Q* out, const T* k_cache, const T* v_cache, const int32_t* block_tables,
               Scales scales, int64_t tile_rows, bool amx_items) {
  std::atomic<int64_t> next{0};
  const int64_t num_items = static_cast<int64_t>(items.size());
  const int64_t max_q = tile_rows * s.group_size;
  const int64_t scratch_floats = max_q * (2 * s.head_dim + score_stride(s.block_size) + 2);
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(scratch_floats);
#ifdef LLMD_HAVE_AMX
    // bf16 prefill rows go to the tile path (see amx_attention.h), decodes stay here.
    constexpr bool kTileShapes = std::is_same_v<T, c10::BFloat16> &&
                                 std::is_same_v<Q, c10::BFloat16> && BS == 16 && D > 0 &&
                                 D % 32 == 0;
    const bool use_tiles = kTileShapes && amx_items;
    std::unique_ptr<amx::Scratch> tiles;
    if (use_tiles) {
      tiles = std::make_unique<amx::Scratch>(s.group_size, s.head_dim);
      amx::configure_tiles();
    }
#endif
    for (int64_t worker = begin; worker < end; ++worker) {
      for (int64_t k = next.fetch_add(1); k < num_items; k = next.fetch_add(1)) {
        const WorkItem& item = items[k];
        const int32_t* table = block_tables + item.seq * s.table_stride;
#ifdef LLMD_HAVE_AMX
        if constexpr (kTileShapes) {
          if (use_tiles && item.num_rows >= amx::kMinRows) {
            amx::attend_item<D>(item, s, query, out, k_cache, v_cache, table, scales.query,
                                scales.out, *tiles);
            continue;
          }
        }
#endif
        attend_item<T, Q, BS, D>(item, s, query, out, k_cache, v_cache, table, scales,
                                 scratch.data());
      }
    }
#ifdef LLMD_HAVE_AMX
    if (use_tiles) _tile_release();
#endif
  });
}

// Specialised loops for the common block size and head dims; any other shape runs the
// generic (runtime-sized) loops.
template <typename T, typename Q>
void dispatch_shapes(const std::vector<WorkItem>& items, const Shapes& s, const Q* query,
                     Q* out, const T* k_cache, const T* v_cache,
                     const int32_t* block_tables, Scales scales, int64_t tile_rows,
                     bool amx_items) {
#define LLMD_RUN(BS, D)                                                                  \
  return run_items<T, Q, BS, D>(items, s, query, out, k_cache, v_cache, block_tables, scales, \
                                tile_rows, amx_items)
  if (s.block_size == 16 && s.head_dim == 64) LLMD_RUN(16, 64);
  if (s.block_size == 16 && s.head_dim == 128) LLMD_RUN(16, 128);
  LLMD_RUN(0, 0);
#undef LLMD_RUN
}

// Attends every work item with queries and outputs of type Q, over any cache dtype. The
// softmax scale and the cache's k/v scales (and fp8's load factor) fold into the queries
// and the outputs, so the inner loops read the cache as it is.
template <typename Q>
void attend_all(const std::vector<WorkItem>& items, const Shapes& s, const at::Tensor& query,
                at::Tensor& out, const at::Tensor& k_cache, const at::Tensor& v_cache,
                const at::Tensor& block_tables, double scale, double k_scale, double v_scale,
                int64_t tile_rows, bool amx_items) {
  const Q* q = query.data_ptr<Q>();
  Q* o = out.data_ptr<Q>();
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  auto run = [&](auto cache_type) {
    using T = decltype(cache_type);
    const Scales scales{static_cast<float>(scale * k_scale) * load_scale<T>(),
                        static_cast<float>(v_scale) * load_scale<T>()};
    dispatch_shapes<T, Q>(items, s, q, o, static_cast<const T*>(k_cache.data_ptr()),
                          static_cast<const T*>(v_cache.data_ptr()), tables, scales, tile_rows,
                          amx_items);
  };
  switch (k_cache.scalar_type()) {
    case at::kFloat: return run(float{});
    case at::kBFloat16: return run(c10::BFloat16{});
    default: return run(c10::Float8_e4m3fn{});
  }
}

// out[num_tokens, num_heads, head_dim] = attention of query (out's dtype: fp32 or bf16,
// computed in fp32) after storing key/value (cache dtype) at slot_mapping. Host int
// tensors describe the sequences.
void paged_attention(at::Tensor out, at::Tensor query, at::Tensor key, at::Tensor value,
                     at::Tensor k_cache, at::Tensor v_cache, at::Tensor slot_mapping,
                     at::Tensor block_tables, at::Tensor query_start_loc, at::Tensor seq_lens,
                     double scale, double k_scale, double v_scale) {
  TORCH_CHECK(query.scalar_type() == out.scalar_type() &&
                  (query.scalar_type() == at::kFloat || query.scalar_type() == at::kBFloat16),
              "query and out must share one dtype, float32 or bfloat16");
  const auto cache_type = k_cache.scalar_type();
  TORCH_CHECK(cache_type == at::kFloat || cache_type == at::kBFloat16 ||
                  cache_type == at::kFloat8_e4m3fn,
              "cache dtype must be fp32, bf16 or fp8 (e4m3)");
  TORCH_CHECK(v_cache.scalar_type() == cache_type && value.scalar_type() == key.scalar_type() &&
                  (key.scalar_type() == cache_type ||
                   (cache_type == at::kFloat8_e4m3fn && key.scalar_type() == query.scalar_type())),
              "key, value and both caches must share one dtype (an fp8 cache takes the "
              "query's dtype and quantizes)");
  TORCH_CHECK(k_scale > 0 && v_scale > 0 && std::isfinite(k_scale) && std::isfinite(v_scale),
              "k_scale and v_scale must be positive and finite");
  TORCH_CHECK(out.is_contiguous() && k_cache.is_contiguous() && v_cache.is_contiguous() &&
                  slot_mapping.is_contiguous() && seq_lens.is_contiguous() &&
                  query_start_loc.is_contiguous() && block_tables.stride(1) == 1,
              "tensors must be contiguous (block_tables: rows of contiguous ids)");
  // query/key/value may be views into the fused qkv projection: any stride between tokens,
  // but each token's heads must lie contiguously.
  for (const at::Tensor* t : {&query, &key, &value}) {
    TORCH_CHECK(t->dim() == 3 && t->stride(2) == 1 && t->stride(1) == t->size(2),
                "query, key and value must be [tokens, heads, head_dim] with contiguous heads");
  }
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && seq_lens.scalar_type() == at::kInt &&
                  query_start_loc.scalar_type() == at::kInt &&
                  slot_mapping.scalar_type() == at::kLong,
              "index tensors: int32 block_tables/seq_lens/query_start_loc, int64 slots");
  Shapes s;
  s.num_heads = query.size(1);
  s.num_kv_heads = k_cache.size(1);
  s.head_dim = k_cache.size(2);
  s.block_size = k_cache.size(3);
  s.group_size = s.num_heads / s.num_kv_heads;
  s.max_blocks = block_tables.size(1);
  s.table_stride = block_tables.stride(0);
  s.q_token_stride = query.stride(0);
  s.k_token_stride = key.stride(0);
  s.v_token_stride = value.stride(0);
  TORCH_CHECK(query_start_loc.size(0) == seq_lens.size(0) + 1 &&
                  block_tables.size(0) >= seq_lens.size(0),
              "need num_seqs + 1 query starts and a block-table row per sequence");
  TORCH_CHECK(s.num_heads % s.num_kv_heads == 0, "num_heads must be a multiple of kv heads");
  TORCH_CHECK(query.size(2) == s.head_dim && v_cache.size(2) == s.block_size &&
                  v_cache.size(3) == s.head_dim,
              "cache shapes do not match the CPU layout");

  store_step_kv(key, value, k_cache, v_cache, slot_mapping, s, k_scale, v_scale);

  // bf16 prefill rows on AMX tiles (16 rows an item) where the CPU and the shapes allow.
  const bool amx_items = tiles_apply(query, k_cache, s);
  const int64_t tile_rows = amx_items ? kAmxTileRows : kTileRows;
  const int32_t* starts = query_start_loc.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  std::vector<WorkItem> items;
  for (int64_t seq = 0; seq < seq_lens.size(0); ++seq) {
    const int64_t query_len = starts[seq + 1] - starts[seq];
    const int64_t seq_len = lens[seq];
    TORCH_CHECK(query_len >= 0 && query_len <= seq_len && seq_len <= s.max_blocks * s.block_size &&
                    starts[seq + 1] <= query.size(0),
                "bad query/context length for sequence ", seq);
    for (int64_t r = 0; r < query_len; r += tile_rows) {
      const int64_t rows = std::min(tile_rows, query_len - r);
      const int64_t position = seq_len - query_len + r;
      for (int64_t h = 0; h < s.num_kv_heads; ++h) {
        items.push_back({seq, h, starts[seq] + r, rows, position, rows * (position + rows)});
      }
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; });
  if (query.scalar_type() == at::kFloat) {
    attend_all<float>(items, s, query, out, k_cache, v_cache, block_tables, scale, k_scale,
                      v_scale, tile_rows, amx_items);
  } else {
    attend_all<c10::BFloat16>(items, s, query, out, k_cache, v_cache, block_tables, scale,
                              k_scale, v_scale, tile_rows, amx_items);
  }
}

// How many threads one at::parallel_for over get_num_threads() tasks really used: 1 when
// the build lost OpenMP (ATen's inline parallel_for then runs serially without a word).
int64_t parallel_workers() {
  const int64_t num_tasks = at::get_num_threads();
  std::vector<std::atomic<int64_t>> seen(num_tasks);
  at::parallel_for(0, num_tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) seen[task] = at::get_thread_num();
  });
  std::vector<int64_t> ids;
  for (auto& id : seen) ids.push_back(id.load());
  std::sort(ids.begin(), ids.end());
  return std::unique(ids.begin(), ids.end()) - ids.begin();
}

}  // namespace

TORCH_LIBRARY(llmd_cpu, m) {
  m.def("paged_attention(Tensor(a!) out, Tensor query, Tensor key, Tensor value, "
        "Tensor(b!) k_cache, Tensor(c!) v_cache, Tensor slot_mapping, Tensor block_tables, "
        "Tensor query_start_loc, Tensor seq_lens, float scale, float k_scale=1.0, "
        "float v_scale=1.0) -> ()");
  m.impl("paged_attention", c10::DispatchKey::CPU, &paged_attention);
  m.def("parallel_workers() -> int", &parallel_workers);
  m.def("set_amx_enabled(bool enabled) -> bool", &set_amx_enabled);
}
