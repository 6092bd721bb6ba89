// Fused float32 and bfloat16 layer ops for the CPU forward pass: RMSNorm (optionally with
// the residual add), rotary embedding in place and SiLU-and-mul. Each replaces two to seven
// ATen ops, and each ATen op on a decode-sized tensor wakes the OpenMP team (50-100 us
// apiece with passive waiting); here a small batch runs on the calling thread and a large
// one is split by rows.
//
// Rounding follows HF's order, and in bfloat16 rounds wherever the ATen ops round (every
// op computes in float32 and rounds its result): RMSNorm computes weight * (x * rsqrt(
// mean(x^2) + eps)), in bf16 round(weight * round(x * rsqrt(...))) after round(x + residual);
// the rotation x1*cos - x2*sin and x2*cos + x1*sin, in bf16 with every product and sum
// rounded. Only the sum of squares is added in a different order than torch's mean, and
// SiLU's exp is a polynomial rather than SLEEF's (fp32 silu within 2 eps of exact). Fused
// SiLU-and-mul beat torch's silu + mul in fp32 and bf16 at 32 and 2,048 rows (ARCHITECTURE.md).
// bf16 is converted with integer ops (round to nearest even), so the same code vectorizes
// on AVX2 and AVX-512 hosts.
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

// Element storage: float, or uint16_t holding bfloat16 bits. load widens to float, store
// rounds to nearest even (NaN stays NaN), round_as does both (identity for float).
inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const uint16_t* p, int64_t i) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(p[i]) << 16);
}
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline uint16_t to_bf16_bits(float v) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, v);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return v != v ? uint16_t{0x7fc0} : static_cast<uint16_t>(rounded);
}
inline void store(uint16_t* p, int64_t i, float v) { p[i] = to_bf16_bits(v); }
template <typename T>
inline float round_as(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __builtin_bit_cast(float, static_cast<uint32_t>(to_bf16_bits(v)) << 16);
  }
}

template <typename T>
T* data(const at::Tensor& tensor) {
  return static_cast<T*>(tensor.data_ptr());
}

// Checks that `tensor` is a CPU tensor of `dtype` (float32 or bfloat16 for the lead
// operand, whose dtype the others must share) with `dims` dimensions, the last contiguous.
void check_rows(const at::Tensor& tensor, const char* name, int64_t dims, at::ScalarType dtype) {
  TORCH_CHECK(tensor.device().is_cpu(), name, " must be on the CPU");
  TORCH_CHECK(tensor.scalar_type() == dtype &&
                  (dtype == at::kFloat || dtype == at::kBFloat16),
              name, " must be float32 or bfloat16 (all operands alike), got ",
              tensor.scalar_type());
  TORCH_CHECK(tensor.dim() == dims, name, " must have ", dims, " dimensions, got ",
              tensor.dim());
  TORCH_CHECK(tensor.stride(dims - 1) == 1, name, "'s last dimension must be contiguous");
}

// Checks RMSNorm's operands: `input` and `other` (out or residual, named `other_name`)
// [rows, hidden] of the same shape, `weight` [hidden]; returns hidden.
int64_t check_norm_operands(const at::Tensor& input, const at::Tensor& other,
                            const char* other_name, const at::Tensor& weight) {
  check_rows(input, "input", 2, input.scalar_type());
  check_rows(other, other_name, 2, input.scalar_type());
  TORCH_CHECK(other.sizes() == input.sizes(), other_name, " and input shapes differ");
  const int64_t hidden_size = input.size(1);
  check_rows(weight, "weight", 1, input.scalar_type());
  TORCH_CHECK(weight.size(0) == hidden_size, "weight has ", weight.size(0),
              " elements, rows have ", hidden_size);
  return hidden_size;
}

template <typename T>
inline float inverse_rms(const T* x, int64_t n, float eps) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += load(x, i) * load(x, i);
  const float variance = sum / static_cast<float>(n);
  return 1.0f / std::sqrt(variance + eps);
}

// y = weight * round(x * scale), rounded to T (HF's low-precision order).
template <typename T>
inline void scale_row(T* y, const T* x, const T* w, float scale, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) store(y, i, load(w, i) * round_as<T>(load(x, i) * scale));
}

// out[r] = weight * (input[r] * rsqrt(mean(input[r]^2) + eps)); input, out: [rows, hidden].
template <typename T>
void rms_norm_impl(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                   int64_t hidden_size, float eps) {
  const T* in = data<T>(input);
  T* dst = data<T>(out);
  const T* w = data<T>(weight);
  const int64_t in_stride = input.stride(0), out_stride = out.stride(0);
  parallel_rows(input.size(0), hidden_size, [&](int64_t row) {
    const T* x = in + row * in_stride;
    scale_row(dst + row * out_stride, x, w, inverse_rms(x, hidden_size, eps), hidden_size);
  });
}

void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps) {
  const int64_t hidden_size = check_norm_operands(input, out, "out", weight);
  if (input.scalar_type() == at::kBFloat16) {
    rms_norm_impl<uint16_t>(out, input, weight, hidden_size, static_cast<float>(eps));
  } else {
    rms_norm_impl<float>(out, input, weight, hidden_size, static_cast<float>(eps));
  }
}

// residual[r] = round(input[r] + residual[r]); input[r] = rms_norm(residual[r]).
template <typename T>
void fused_add_rms_norm_impl(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                             int64_t hidden_size, float eps) {
  T* in = data<T>(input);
  T* res = data<T>(residual);
  const T* w = data<T>(weight);
  const int64_t in_stride = input.stride(0), res_stride = residual.stride(0);
  parallel_rows(input.size(0), hidden_size, [&](int64_t row) {
    T* x = in + row * in_stride;
    T* r = res + row * res_stride;
#pragma omp simd
    for (int64_t i = 0; i < hidden_size; ++i) store(r, i, load(x, i) + load(r, i));
    scale_row(x, r, w, inverse_rms(r, hidden_size, eps), hidden_size);
  });
}

void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                        double eps) {
  const int64_t hidden_size = check_norm_operands(input, residual, "residual", weight);
  if (input.scalar_type() == at::kBFloat16) {
    fused_add_rms_norm_impl<uint16_t>(input, residual, weight, hidden_size,
                                      static_cast<float>(eps));
  } else {
    fused_add_rms_norm_impl<float>(input, residual, weight, hidden_size, static_cast<float>(eps));
  }
}

// exp(x) for x <= 0 (SiLU passes -|g|): 2^n * p(r) with r = x - n ln2 in [-ln2/2, ln2/2]
// and p its degree-7 Taylor polynomial (error under 1e-8); 2^n is applied as two normal
// halves so results down to float32's subnormals stay exact, and below -104 it is 0.
inline float exp_nonpositive(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (std::max(x, -104.0f) * 1.44269504f + kRound) - kRound;
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.98412698e-4f;
  p = p * r + 1.38888889e-3f;
  p = p * r + 8.33333333e-3f;
  p = p * r + 4.16666667e-2f;
  p = p * r + 1.66666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t n_total = static_cast<int32_t>(n), n_half = n_total / 2;
  const float scale_a = __builtin_bit_cast(float, static_cast<uint32_t>(n_half + 127) << 23);
  const float scale_b =
      __builtin_bit_cast(float, static_cast<uint32_t>(n_total - n_half + 127) << 23);
  return x < -104.0f ? 0.0f : p * scale_a * scale_b;
}

// silu(g) = g / (1 + exp(-g)); for g > 0 it is g / (1 + e) with e = exp(-g), for g <= 0
// g * e / (1 + e) with e = exp(g): one exp of a non-positive argument, no overflow.
template <typename T>
void silu_and_mul_impl(at::Tensor& out, const at::Tensor& gate_up) {
  const int64_t width = out.size(1);
  const T* in = data<T>(gate_up);
  T* dst = data<T>(out);
  const int64_t in_stride = gate_up.stride(0), out_stride = out.stride(0);
  parallel_rows(out.size(0), 3 * width, [&](int64_t row) {
    const T* gate = in + row * in_stride;
    const T* up = gate + width;
    T* y = dst + row * out_stride;
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) {
      const float g = load(gate, i);
      const float e = exp_nonpositive(-std::fabs(g));
      const float silu = (g > 0.f ? g : g * e) / (1.0f + e);
      store(y, i, round_as<T>(silu) * load(up, i));
    }
  });
}

// out = silu(gate_up[:, :I]) * gate_up[:, I:]; gate_up: [rows, 2 I] (any row stride),
// out: [rows, I], both float32 or both bfloat16 (silu rounded to bf16 before the product).
void silu_and_mul(at::Tensor& out, const at::Tensor& gate_up) {
  check_rows(gate_up, "gate_up", 2, gate_up.scalar_type());
  check_rows(out, "out", 2, gate_up.scalar_type());
  TORCH_CHECK(gate_up.size(0) == out.size(0) && gate_up.size(1) == 2 * out.size(1),
              "out must be [rows, I] for gate_up [rows, 2 I]");
  if (gate_up.scalar_type() == at::kBFloat16) {
    silu_and_mul_impl<uint16_t>(out, gate_up);
  } else {
    silu_and_mul_impl<float>(out, gate_up);
  }
}

// From here on no fused multiply-adds: every product and sum rounds separately, as in
// the ATen ops (and HF) the rotation replaces, so it matches them bit for bit.
#pragma GCC optimize("fp-contract=off")

template <typename T>
void rotary_impl(at::Tensor& heads, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t num_tokens = heads.size(0), num_heads = heads.size(1);
  const int64_t half = heads.size(2) / 2;
  T* base = data<T>(heads);
  const T* cos_base = data<T>(cos);
  const T* sin_base = data<T>(sin);
  const int64_t token_stride = heads.stride(0), head_stride = heads.stride(1);
  const int64_t cos_stride = cos.stride(0), sin_stride = sin.stride(0);
  parallel_rows(num_tokens, num_heads * 2 * half, [&](int64_t token) {
    const T* c = cos_base + token * cos_stride;
    const T* s = sin_base + token * sin_stride;
    for (int64_t head = 0; head < num_heads; ++head) {
      T* first = base + token * token_stride + head * head_stride;
      T* second = first + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = load(first, i), b = load(second, i), ci = load(c, i), si = load(s, i);
        const float a_cos = round_as<T>(a * ci), b_sin = round_as<T>(b * si);
        const float b_cos = round_as<T>(b * ci), a_sin = round_as<T>(a * si);
        store(first, i, a_cos - b_sin);
        store(second, i, b_cos + a_sin);
      }
    }
  });
}

// Rotates pairs (i, i + head_dim/2) of every head in place (HF's rotate_half layout).
// heads: [tokens, num_heads, head_dim] (any token and head strides); cos, sin:
// [tokens, head_dim / 2], one row per token, in heads' dtype.
void rotary_embedding(at::Tensor& heads, const at::Tensor& cos, const at::Tensor& sin) {
  check_rows(heads, "heads", 3, heads.scalar_type());
  check_rows(cos, "cos", 2, heads.scalar_type());
  check_rows(sin, "sin", 2, heads.scalar_type());
  TORCH_CHECK(heads.size(2) % 2 == 0, "head_dim must be even, got ", heads.size(2));
  TORCH_CHECK(cos.size(0) == heads.size(0) && cos.size(1) == heads.size(2) / 2 &&
                  cos.sizes() == sin.sizes(),
              "cos and sin must be [tokens, head_dim / 2]");
  if (heads.scalar_type() == at::kBFloat16) {
    rotary_impl<uint16_t>(heads, cos, sin);
  } else {
    rotary_impl<float>(heads, cos, sin);
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llmd_cpu, m) {
  m.def("rms_norm(Tensor(a!) out, Tensor input, Tensor weight, float eps) -> ()");
  m.def("fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, "
        "float eps) -> ()");
  m.def("rotary_embedding(Tensor(a!) heads, Tensor cos, Tensor sin) -> ()");
  m.def("silu_and_mul(Tensor(a!) out, Tensor gate_up) -> ()");

  m.impl("rms_norm", c10::DispatchKey::CPU, &rms_norm);
  m.impl("fused_add_rms_norm", c10::DispatchKey::CPU, &fused_add_rms_norm);
  m.impl("rotary_embedding", c10::DispatchKey::CPU, &rotary_embedding);
  m.impl("silu_and_mul", c10::DispatchKey::CPU, &silu_and_mul);
}
