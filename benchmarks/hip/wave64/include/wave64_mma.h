// pyllama90a: NVIDIA's warp-level MMA of the fused decode's V^T p (patch 0053), emulated for the wave64 harness:
// every lane of a group of 32 gathers its group's fragments by shuffles (width 32: a 64-wide wavefront holds two
// groups, each its own MMA, as two 32-wide warps would) and computes its part of C as PTX's fragment layouts say.
// So the harness checks the kernel's fragments against our reading of those layouts; the GPU tests check them
// against the hardware. Our code.
#pragma once

// c += a*b, m16n8k16, f16 inputs and F32 sums (gid = lane/4, tig = lane%4): a[0] row gid, k 2*tig, +1 (a half
// each), a[1] row gid + 8, a[2] and a[3] the same rows at k + 8; b[0] column gid, k 2*tig, +1, b[1] k + 8; c[0],
// c[1] row gid, columns 2*tig, +1, c[2], c[3] row gid + 8
static __device__ inline void wave64_mma_m16n8k16_f32_f16(float (&c)[4], const uint32_t (&a)[4],
                                                         const uint32_t (&b)[2]) {
    uint32_t A[32][4];
    uint32_t B[32][2];
    for (int l = 0; l < 32; ++l) {
        for (int r = 0; r < 4; ++r) {
            A[l][r] = __shfl_sync(0xFFFFFFFF, a[r], l, 32);
        }
        for (int r = 0; r < 2; ++r) {
            B[l][r] = __shfl_sync(0xFFFFFFFF, b[r], l, 32);
        }
    }
    const auto h = [](const uint32_t w, const int i) -> float {  // half i of a word
        const uint16_t u = (uint16_t) (w >> (16*i));
        half x;
        memcpy(&x, &u, 2);
        return __half2float(x);
    };
    const int gid = (threadIdx.x % 32) / 4;
    const int tig = threadIdx.x % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = gid + 8*(e/2);
        const int col = 2*tig + e%2;
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) {  // A's (row, k) is in lane 4*(row % 8) + (k % 8)/2, register row/8 + 2*(k/8)
            sum += h(A[(row % 8)*4 + (k % 8)/2][row/8 + 2*(k/8)], k % 2)*h(B[col*4 + (k % 8)/2][k/8], k % 2);
        }
        c[e] += sum;
    }
}
