// pyllama90a compile-only shim, force-included (-include) before every translation unit: what ggml-cuda
// takes from ROCm >= 6 and Debian's HIP 5.2.3 (clang 15) lacks, besides the two stand-in headers
// hip/hip_bf16.h and hipblas/hipblas.h next to this file. Each item is exact or a pure scheduling hint:
//   - __shfl_xor / __shfl_up of half2: the 32-bit pattern shuffled as an int (what a lane receives is
//     bit-identical); HIP 5.2 has these shuffles for int/float/double/long only.
//   - __hmax(half, half): max of two halves, through float (exactly representable, fmaxf's NaN rule).
//   - __builtin_amdgcn_sched_group_barrier: an LLVM >= 16 instruction-scheduling hint (ggml-cuda's
//     fattn-common.cuh uses it to keep a load near its use). A no-op here: only the schedule changes.
//   - hipStreamWaitEvent(stream, event): the two-argument form (flags 0, CUDA's default) that HIP >= 6 has.
//   - hipHostRegisterReadOnly: a flag HIP 5.2 does not know; 0 here, i.e. the read-only hint is dropped
//     (registering without it is valid, only the hint is lost).
//   - __bf16 on amdgcn (clang < 17 rejects the type there): ggml-cuda's mma.cuh hands bf16 vectors to the
//     bf16 MFMA builtins, which in clang 15 take the same 16-bit patterns as short vectors; spelling
//     __bf16 as short for clang < 17 passes the identical bits to the identical instruction.
#pragma once

#define HIP_DISABLE_WARP_SYNC_BUILTINS 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

#if HIP_VERSION < 60000000

static __device__ inline __half2 __shfl_xor(const __half2 var, const int lane_mask, const int width = warpSize) {
    return __builtin_bit_cast(__half2, __shfl_xor(__builtin_bit_cast(int, var), lane_mask, width));
}

static __device__ inline __half2 __shfl_up(const __half2 var, const unsigned int delta, const int width = warpSize) {
    return __builtin_bit_cast(__half2, __shfl_up(__builtin_bit_cast(int, var), delta, width));
}

static __device__ inline __half __hmax(const __half a, const __half b) {
    return __float2half(fmaxf(__half2float(a), __half2float(b)));
}

static inline hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event) {
    return hipStreamWaitEvent(stream, event, 0);
}

#ifndef hipHostRegisterReadOnly
#define hipHostRegisterReadOnly 0
#endif

#endif // HIP_VERSION < 60000000

#ifndef __has_builtin
#define __has_builtin(x) 0
#endif
#if !__has_builtin(__builtin_amdgcn_sched_group_barrier)
#define __builtin_amdgcn_sched_group_barrier(mask, size, sync_id) ((void) 0)
#endif

#if defined(__clang_major__) && __clang_major__ < 17
#define __bf16 short
#endif
