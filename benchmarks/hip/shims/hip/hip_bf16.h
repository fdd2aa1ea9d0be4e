// pyllama90a compile-only shim: stands in for ROCm >= 6's <hip/hip_bf16.h>, which Debian's HIP 5.2.3
// lacks. It declares the two types ggml-cuda names (through vendors/hip.h: nv_bfloat16, nv_bfloat162)
// and the conversions ggml-cuda's headers call. Written for a compile check on gfx90a: round-to-nearest-
// even float -> bf16, exact bf16 -> float. Not ROCm's implementation and not its full API.
#pragma once

#include <stdint.h>
#include <hip/hip_runtime.h>

struct __hip_bfloat16 {
    uint16_t data;

    __hip_bfloat16() = default;
    __host__ __device__ __hip_bfloat16(const float f) : data(from_float(f)) {}
    __host__ __device__ operator float() const {
        return __builtin_bit_cast(float, (uint32_t) data << 16);
    }

    static __host__ __device__ uint16_t from_float(const float f) {
        const uint32_t u = __builtin_bit_cast(uint32_t, f);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            return (uint16_t) ((u >> 16) | 0x0040u); // NaN stays a (quiet) NaN
        }
        return (uint16_t) ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
};

struct __hip_bfloat162 {
    __hip_bfloat16 x;
    __hip_bfloat16 y;
};

static __host__ __device__ inline __hip_bfloat16 __float2bfloat16(const float f) { return __hip_bfloat16(f); }
static __host__ __device__ inline float __bfloat162float(const __hip_bfloat16 b) { return float(b); }
static __host__ __device__ inline __hip_bfloat16 __low2bfloat16(const __hip_bfloat162 b) { return b.x; }
static __host__ __device__ inline __hip_bfloat16 __high2bfloat16(const __hip_bfloat162 b) { return b.y; }
static __host__ __device__ inline float2 __bfloat1622float2(const __hip_bfloat162 b) {
    return make_float2(float(b.x), float(b.y));
}
static __host__ __device__ inline __hip_bfloat162 __float22bfloat162_rn(const float2 f) {
    return { __hip_bfloat16(f.x), __hip_bfloat16(f.y) };
}
