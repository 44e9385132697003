// SPDX-License-Identifier: MIT
// Evaluation only (``ropekit bench --mode extension``): the same in-place half-layout float32 rotation as
// rope_cpu.c, written as a torch C++ extension -- at::parallel_for on torch's own thread pool, registered as the
// torch op ropekit_ext::rope_ -- to measure it against the ctypes build. Not used by ropekit's dispatch.
// x: [B, H, S, D] contiguous float32, rotated in place on its first r channels; cos/sin: [S, n] or [B, S, n].
#include <ATen/Parallel.h>
#include <torch/library.h>

namespace {

void rope_(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin, int64_t r) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == at::kFloat && x.dim() == 4, "x: contiguous float32 bhsd");
    TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.scalar_type() == at::kFloat, "tables");
    const int64_t B = x.size(0), H = x.size(1), S = x.size(2), D = x.size(3), n = r / 2;
    const bool per_batch = cos.dim() == 3 && cos.size(0) == B && B > 1;
    float* p = x.data_ptr<float>();
    const float* c = cos.data_ptr<float>();
    const float* s = sin.data_ptr<float>();
    at::parallel_for(0, B * H * S, std::max<int64_t>(1, 262144 / D), [&](int64_t b0, int64_t b1) {
        for (int64_t row = b0; row < b1; ++row) {
            const int64_t si = row % S, bi = row / (S * H);
            const int64_t t = ((per_batch ? bi * S : 0) + si) * n;
            float* xr = p + row * D;
            for (int64_t i = 0; i < n; ++i) {
                const float a = xr[i], b = xr[i + n];
                xr[i] = a * c[t + i] - b * s[t + i];
                xr[i + n] = b * c[t + i] + a * s[t + i];
            }
        }
    });
}

}  // namespace

TORCH_LIBRARY(ropekit_ext, m) { m.def("rope_(Tensor(a!) x, Tensor cos, Tensor sin, int r) -> ()"); }
TORCH_LIBRARY_IMPL(ropekit_ext, CPU, m) { m.impl("rope_", &rope_); }
