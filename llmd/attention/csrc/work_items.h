// The paged-attention op's unit of work and the shapes every kernel path reads.
//
// Shared by the vector (FMA) path in paged_attention.cpp and the AMX tile path in
// amx_attention.h, so both walk the same items over the same cache layout.
#pragma once

#include <cstdint>

namespace llmd_cpu {

struct WorkItem {
  int64_t seq;
  int64_t kv_head;
  int64_t row_begin;  // first query row (absolute row of q/out)
  int64_t num_rows;
  int64_t first_position;  // context position of row_begin
  int64_t cost;  // rows x context, for ordering
};

struct Shapes {
  int64_t num_heads, num_kv_heads, group_size, head_dim, block_size, max_blocks;
  int64_t table_stride;  // elements between two sequences' block-table rows
  int64_t q_token_stride, k_token_stride, v_token_stride;  // elements between two tokens
};

// Factors folded into the queries (softmax scale x k scale) and into the outputs (v scale),
// each times the cache type's load factor (fp8 reads as value / 256, see vec_math.h).
struct Scales {
  float query;
  float out;
};

}  // namespace llmd_cpu
