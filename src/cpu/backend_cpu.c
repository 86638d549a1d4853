// The CPU backend: the reference kernels of kernels.h, buffers from the
// aligned host allocator.
#include <string.h>

#include "backend.h"
#include "optim.h"
#include "util.h"

static void cpu_add(float *dst, const float *a, const float *b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

static void cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }

const ts_backend ts_backend_cpu = {
    .name = "cpu",
    .alloc = ts_alloc,
    .free = ts_free,
    .add = cpu_add,
    .copy = cpu_copy,
    .encoder_forward = encoder_forward,
    .encoder_backward_wpe = encoder_backward_wpe,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .linear_forward = linear_forward,
    .linear_forward_heads = linear_forward_heads,
    .linear_forward_head_list = linear_forward_head_list,
    .linear_backward_input = linear_backward_input,
    .linear_backward_weights = linear_backward_weights,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .dropout_apply = dropout_apply,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .crossentropy_forward = crossentropy_forward,
    .crossentropy_backward = crossentropy_backward,
    .adamw = ts_adamw_elements,
    .muon_update = ts_muon_update,
};
