// pyllama90a wave64 runtime: bfloat16 (truncating to and widening from float)
#pragma once
#include <cstdint>
#include <cstring>
struct __hip_bfloat16 {
    uint16_t data;
    __hip_bfloat16() = default;
    __hip_bfloat16(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); data = (uint16_t) (u >> 16); }
    operator float() const { uint32_t u = (uint32_t) data << 16; float f; memcpy(&f, &u, 4); return f; }
};
struct __hip_bfloat162 { __hip_bfloat16 x, y; };
static inline float __bfloat162float(__hip_bfloat16 b) { return (float) b; }
static inline __hip_bfloat16 __float2bfloat16(float f) { return __hip_bfloat16(f); }
