// pyllama90a wave64 runtime: half precision as the host compiler's _Float16 (IEEE binary16, round to nearest)
#pragma once
#include <cmath>
#include <cstring>
#include "wave64.h"

typedef _Float16 __half;
typedef __half half;

struct __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(__half a, __half b) : x(a), y(b) {}
};
typedef __half2 half2;

static inline __half2 operator+(__half2 a, __half2 b) { return {(__half) (a.x + b.x), (__half) (a.y + b.y)}; }
static inline __half2 operator-(__half2 a, __half2 b) { return {(__half) (a.x - b.x), (__half) (a.y - b.y)}; }
static inline __half2 operator*(__half2 a, __half2 b) { return {(__half) (a.x * b.x), (__half) (a.y * b.y)}; }
static inline __half2 operator/(__half2 a, __half2 b) { return {(__half) (a.x / b.x), (__half) (a.y / b.y)}; }
static inline __half2 operator-(__half2 a) { return {(__half) -a.x, (__half) -a.y}; }
static inline __half2 & operator+=(__half2 & a, __half2 b) { return a = a + b; }
static inline __half2 & operator-=(__half2 & a, __half2 b) { return a = a - b; }
static inline __half2 & operator*=(__half2 & a, __half2 b) { return a = a * b; }

static inline float __half2float(__half h) { return (float) h; }
static inline __half __float2half(float f) { return (__half) f; }
static inline __half __float2half_rn(float f) { return (__half) f; }
static inline __half __int2half_rn(int i) { return (__half) i; }
static inline __half __ushort_as_half(unsigned short u) { __half h; memcpy(&h, &u, 2); return h; }
static inline unsigned short __half_as_ushort(__half h) { unsigned short u; memcpy(&u, &h, 2); return u; }
static inline float2 __half22float2(__half2 h) { return {(float) h.x, (float) h.y}; }
static inline __half2 __float22half2_rn(float2 f) { return {(__half) f.x, (__half) f.y}; }
static inline __half2 __floats2half2_rn(float a, float b) { return {(__half) a, (__half) b}; }
static inline __half2 __float2half2_rn(float a) { return {(__half) a, (__half) a}; }
static inline __half2 make_half2(__half a, __half b) { return {a, b}; }
static inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
static inline __half2 __half2half2(__half a) { return {a, a}; }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline float __low2float(__half2 h) { return (float) h.x; }
static inline float __high2float(__half2 h) { return (float) h.y; }
static inline __half2 __lows2half2(__half2 a, __half2 b) { return {a.x, b.x}; }
static inline __half2 __highs2half2(__half2 a, __half2 b) { return {a.y, b.y}; }
static inline __half2 __hadd2(__half2 a, __half2 b) { return a + b; }
static inline __half2 __hsub2(__half2 a, __half2 b) { return a - b; }
static inline __half2 __hmul2(__half2 a, __half2 b) { return a * b; }
static inline __half2 __h2div(__half2 a, __half2 b) { return a / b; }
static inline __half2 __hneg2(__half2 a) { return -a; }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
    return {(__half) fmaf(a.x, b.x, c.x), (__half) fmaf(a.y, b.y, c.y)};
}
static inline __half2 __habs2(__half2 a) { return {(__half) fabsf(a.x), (__half) fabsf(a.y)}; }
static inline __half __hadd(__half a, __half b) { return a + b; }
static inline __half __hsub(__half a, __half b) { return a - b; }
static inline __half __hmul(__half a, __half b) { return a * b; }
static inline __half __hdiv(__half a, __half b) { return a / b; }
static inline __half __hneg(__half a) { return -a; }
static inline __half __habs(__half a) { return (__half) fabsf(a); }
static inline __half __hmax(__half a, __half b) { return a > b ? a : b; }
static inline __half __hmin(__half a, __half b) { return a < b ? a : b; }
static inline __half2 __hmax2(__half2 a, __half2 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }
static inline __half2 __hmin2(__half2 a, __half2 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }
static inline bool __hgt(__half a, __half b) { return a > b; }
static inline bool __hge(__half a, __half b) { return a >= b; }
static inline bool __hlt(__half a, __half b) { return a < b; }
static inline bool __heq(__half a, __half b) { return a == b; }
static inline bool __hisinf(__half a) { return std::isinf((float) a); }
static inline bool __hisnan(__half a) { return std::isnan((float) a); }
static inline __half hexp(__half a) { return (__half) expf(a); }
static inline __half2 h2exp(__half2 a) { return {(__half) expf(a.x), (__half) expf(a.y)}; }
static inline __half hsqrt(__half a) { return (__half) sqrtf(a); }
