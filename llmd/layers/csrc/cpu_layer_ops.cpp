// Fused float32 layer ops for the CPU forward pass: RMSNorm (optionally with the residual
// add) and rotary embedding in place. Each replaces five to seven ATen ops, and each ATen
// op on a decode-sized tensor wakes the OpenMP team (50-100 us apiece with passive
// waiting); here a small batch runs on the calling thread and a large one is split by rows.
//
// Rounding follows HF's order: RMSNorm computes weight * (x * rsqrt(mean(x^2) + eps)), the
// rotation x1*cos - x2*sin and x2*cos + x1*sin; only the sum of squares is added in a
// different order than torch's mean. (A fused SiLU-and-mul with a polynomial exp measured
// 2x slower than torch's SLEEF-vectorized silu and mul, so the MLP keeps torch's ops.)
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {

constexpr int64_t kMinElementsPerTask = 1 << 16;
// Fewer elements than this per task cost more to hand to another thread than to compute.

int64_t grain_rows(int64_t elements_per_row) {
  return std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(1, elements_per_row));
}

// Calls row_fn(row) for every row in [0, num_rows), split into tasks of at least
// kMinElementsPerTask elements (a small batch stays on the calling thread).
template <typename RowFn>
void parallel_rows(int64_t num_rows, int64_t elements_per_row, const RowFn& row_fn) {
  at::parallel_for(0, num_rows, grain_rows(elements_per_row), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) row_fn(row);
  });
}

void check_float_rows(const at::Tensor& tensor, const char* name, int64_t dims) {
  TORCH_CHECK(tensor.device().is_cpu(), name, " must be on the CPU");
  TORCH_CHECK(tensor.scalar_type() == at::kFloat, name, " must be float32, got ",
              tensor.scalar_type());
  TORCH_CHECK(tensor.dim() == dims, name, " must have ", dims, " dimensions, got ",
              tensor.dim());
  TORCH_CHECK(tensor.stride(dims - 1) == 1, name, "'s last dimension must be contiguous");
}

// Checks RMSNorm's operands: `input` and `other` (out or residual, named `other_name`)
// [rows, hidden] of the same shape, `weight` [hidden]; returns hidden.
int64_t check_norm_operands(const at::Tensor& input, const at::Tensor& other,
                            const char* other_name, const at::Tensor& weight) {
  check_float_rows(input, "input", 2);
  check_float_rows(other, other_name, 2);
  TORCH_CHECK(other.sizes() == input.sizes(), other_name, " and input shapes differ");
  const int64_t hidden_size = input.size(1);
  check_float_rows(weight, "weight", 1);
  TORCH_CHECK(weight.size(0) == hidden_size, "weight has ", weight.size(0),
              " elements, rows have ", hidden_size);
  return hidden_size;
}

inline float inverse_rms(const float* x, int64_t n, float eps) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float variance = sum / static_cast<float>(n);
  return 1.0f / std::sqrt(variance + eps);
}

// out[r] = weight * (input[r] * rsqrt(mean(input[r]^2) + eps)); input, out: [rows, hidden].
void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps) {
  const int64_t hidden_size = check_norm_operands(input, out, "out", weight);
  const int64_t num_rows = input.size(0);
  const float* in = input.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  const int64_t in_stride = input.stride(0), out_stride = out.stride(0);
  const float epsilon = static_cast<float>(eps);
  parallel_rows(num_rows, hidden_size, [&](int64_t row) {
    const float* x = in + row * in_stride;
    float* y = dst + row * out_stride;
    const float scale = inverse_rms(x, hidden_size, epsilon);
#pragma omp simd
    for (int64_t i = 0; i < hidden_size; ++i) y[i] = w[i] * (x[i] * scale);
  });
}

// residual[r] += input[r]; input[r] = weight * (residual[r] * rsqrt(mean(residual[r]^2) + eps)).
void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                        double eps) {
  const int64_t hidden_size = check_norm_operands(input, residual, "residual", weight);
  const int64_t num_rows = input.size(0);
  float* in = input.data_ptr<float>();
  float* res = residual.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  const int64_t in_stride = input.stride(0), res_stride = residual.stride(0);
  const float epsilon = static_cast<float>(eps);
  parallel_rows(num_rows, hidden_size, [&](int64_t row) {
    float* x = in + row * in_stride;
    float* r = res + row * res_stride;
#pragma omp simd
    for (int64_t i = 0; i < hidden_size; ++i) r[i] = x[i] + r[i];
    const float scale = inverse_rms(r, hidden_size, epsilon);
#pragma omp simd
    for (int64_t i = 0; i < hidden_size; ++i) x[i] = w[i] * (r[i] * scale);
  });
}

// From here on no fused multiply-adds: every product and sum rounds separately, as in
// the ATen ops (and HF) the rotation replaces, so it matches them bit for bit.
#pragma GCC optimize("fp-contract=off")

// Rotates pairs (i, i + head_dim/2) of every head in place (HF's rotate_half layout).
// heads: [tokens, num_heads, head_dim] (any token and head strides); cos, sin:
// [tokens, head_dim / 2], one row per token.
void rotary_embedding(at::Tensor& heads, const at::Tensor& cos, const at::Tensor& sin) {
  check_float_rows(heads, "heads", 3);
  check_float_rows(cos, "cos", 2);
  check_float_rows(sin, "sin", 2);
  const int64_t num_tokens = heads.size(0), num_heads = heads.size(1);
  const int64_t half = heads.size(2) / 2;
  TORCH_CHECK(heads.size(2) % 2 == 0, "head_dim must be even, got ", heads.size(2));
  TORCH_CHECK(cos.size(0) == num_tokens && cos.size(1) == half && cos.sizes() == sin.sizes(),
              "cos and sin must be [tokens, head_dim / 2]");
  float* base = heads.data_ptr<float>();
  const float* cos_base = cos.data_ptr<float>();
  const float* sin_base = sin.data_ptr<float>();
  const int64_t token_stride = heads.stride(0), head_stride = heads.stride(1);
  const int64_t cos_stride = cos.stride(0), sin_stride = sin.stride(0);
  at::parallel_for(0, num_tokens, grain_rows(num_heads * 2 * half), [&](int64_t begin,
                                                                       int64_t end) {
    for (int64_t token = begin; token < end; ++token) {
      const float* c = cos_base + token * cos_stride;
      const float* s = sin_base + token * sin_stride;
      for (int64_t head = 0; head < num_heads; ++head) {
        float* first = base + token * token_stride + head * head_stride;
        float* second = first + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = first[i], b = second[i];
          const float a_cos = a * c[i], b_sin = b * s[i], b_cos = b * c[i], a_sin = a * s[i];
          first[i] = a_cos - b_sin;
          second[i] = b_cos + a_sin;
        }
      }
    }
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmd_cpu, m) {
  m.def("rms_norm(Tensor(a!) out, Tensor input, Tensor weight, float eps) -> ()");
  m.def("fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, "
        "float eps) -> ()");
  m.def("rotary_embedding(Tensor(a!) heads, Tensor cos, Tensor sin) -> ()");

  m.impl("rms_norm", c10::DispatchKey::CPU, &rms_norm);
  m.impl("fused_add_rms_norm", c10::DispatchKey::CPU, &fused_add_rms_norm);
  m.impl("rotary_embedding", c10::DispatchKey::CPU, &rotary_embedding);
}
