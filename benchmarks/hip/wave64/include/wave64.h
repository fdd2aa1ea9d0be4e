// pyllama90a: a small HIP runtime that executes HIP kernels on the CPU with 64-wide wavefronts (AMD GCN/CDNA,
// e.g. gfx90a), for checking kernels written against 32-wide warps. Our code; the harness compiles llama.cpp's
// patched ggml-cuda sources over it as HIP for gfx90a (GGML_USE_HIP, __gfx90a__), host-compiled by clang.
//
// Execution model, as the hardware's:
// - A block's threads are linearized (x fastest) and cut into wavefronts of WAVE64_WIDTH (64) lanes; every
//   thread is a fiber (its own stack), run until it blocks at a cross-lane operation, a barrier or its end.
// - Cross-lane operations are ds_bpermute (what HIP's __shfl, __shfl_xor, __shfl_up and __shfl_down compile
//   to, with HIP's own index formulas below) and ballot. The lanes of a wavefront that reach the same
//   operation (the same call site) together are its active lanes (the EXEC mask); a lane that reads a lane
//   that is not active gets 0, as the hardware gives, and the read is recorded as a fault. A group whose
//   sources are still on their way to the same site waits for them (reconvergence after a branch).
// - __syncthreads releases when every thread that has not returned waits at it; threads waiting at two
//   different barriers at once are recorded as a fault.
// - Lanes run one after another between those points, in the order a launch option gives (forward or
//   reversed): a kernel whose result depends on that order races on memory without a barrier.
// - Dynamic shared memory is filled with NaN before every block; device buffers (wave64::device_alloc)
//   end at a guard page, so a read past their end faults.
#pragma once

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#ifndef WAVE64_WIDTH
#define WAVE64_WIDTH 64
#endif

#if !defined(__x86_64__)
#error "wave64.h: the fiber switch is written for x86-64"
#endif

// ---- the keywords of HIP's device code, for a host compiler ------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__
#define __restrict__ __restrict

static constexpr int warpSize = WAVE64_WIDTH;

// ---- vector types ------------------------------------------------------------------------------------------

#define WAVE64_VEC2(T, N, A) \
    struct alignas(A) N { T x, y; }; \
    static inline N make_##N(T x, T y) { return N{x, y}; }
#define WAVE64_VEC3(T, N) \
    struct N { T x, y, z; }; \
    static inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define WAVE64_VEC4(T, N, A) \
    struct alignas(A) N { T x, y, z, w; }; \
    static inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }

WAVE64_VEC2(float, float2, 8)
WAVE64_VEC3(float, float3)
WAVE64_VEC4(float, float4, 16)
WAVE64_VEC2(double, double2, 16)
WAVE64_VEC2(int, int2, 8)
WAVE64_VEC3(int, int3)
WAVE64_VEC4(int, int4, 16)
WAVE64_VEC2(unsigned int, uint2, 8)
WAVE64_VEC3(unsigned int, uint3)
WAVE64_VEC4(unsigned int, uint4, 16)
WAVE64_VEC2(short, short2, 4)
WAVE64_VEC2(unsigned short, ushort2, 4)
WAVE64_VEC4(signed char, char4, 4)
WAVE64_VEC4(unsigned char, uchar4, 4)
WAVE64_VEC2(char, char2, 2)
WAVE64_VEC2(unsigned char, uchar2, 2)
WAVE64_VEC2(long long, longlong2, 16)

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

// ---- fibers --------------------------------------------------------------------------------------------------

extern "C" void wave64_swap(void ** save_sp, void * load_sp);

namespace wave64 {

enum class State { run, shuffle, ballot, barrier, done };

struct Lane {
    void *  sp = nullptr;
    char *  stack = nullptr;      // mmap'd, a guard page at its low end
    State   state = State::done;
    const void * site = nullptr;  // the call site it waits at
    dim3    thread_idx;
    int     tid = 0;              // linear thread id in the block
    int     index = 0;            // bpermute: the lane it reads
    uint32_t value = 0;           // bpermute: what it offers; ballot: its predicate
    uint32_t result = 0;
    uint64_t mask = 0;            // ballot's result
};

struct Launch {
    dim3 grid, block, block_idx;
    size_t smem = 0;
    bool reversed = false;        // run the lanes of a step last to first
};

inline constexpr size_t kStackBytes = 256 * 1024;
inline constexpr int    kMaxThreads = 1024;

struct Runtime {
    std::vector<Lane> lanes = std::vector<Lane>(kMaxThreads);
    void * sched_sp = nullptr;
    Lane * cur = nullptr;
    Launch launch;
    std::vector<unsigned char> smem;
    std::function<void()> body;
    std::vector<std::string> faults;
    bool reversed = false;        // the order of the next launches
    long long launches = 0, blocks = 0;

    Runtime() {
        const size_t page = (size_t) sysconf(_SC_PAGESIZE);
        for (auto & l : lanes) {
            void * p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                perror("wave64: mmap");
                abort();
            }
            mprotect(p, page, PROT_NONE);
            l.stack = (char *) p + page;
        }
    }
};

inline Runtime & rt() {
    static Runtime r;
    return r;
}

inline void fault(const std::string & what) {
    auto & faults = rt().faults;
    if (faults.size() < 64) {
        faults.push_back(what);
    }
}

[[noreturn]] inline void fiber_entry() {
    Runtime & r = rt();
    r.body();
    r.cur->state = State::done;
    wave64_swap(&r.cur->sp, r.sched_sp);
    __builtin_unreachable();
}

inline void start_fiber(Lane & l) {
    // the stack as wave64_swap leaves it: fp control words, six callee-saved registers, the return address
    uintptr_t top = ((uintptr_t) (l.stack + kStackBytes)) & ~(uintptr_t) 15;
    uint64_t * s = (uint64_t *) top;
    *--s = 0;                                  // alignment: fiber_entry starts as if called
    *--s = (uint64_t) (uintptr_t) &fiber_entry;
    for (int i = 0; i < 6; ++i) {
        *--s = 0;
    }
    *--s = 0x037F00001F80ull;                  // mxcsr (low 32 bits), x87 control word (bits 32..47)
    l.sp = s;
    l.state = State::run;
}

// block the current lane at a cross-lane point until the scheduler resumes it
inline void yield(State st, const void * site) {
    Runtime & r = rt();
    r.cur->state = st;
    r.cur->site = site;
    wave64_swap(&r.cur->sp, r.sched_sp);
}

inline int lane_id() {
    return rt().cur->tid % WAVE64_WIDTH;
}

inline std::string where() {
    const Launch & L = rt().launch;
    char buf[96];
    snprintf(buf, sizeof(buf), "block (%u,%u,%u) thread %d", L.block_idx.x, L.block_idx.y, L.block_idx.z,
             rt().cur ? rt().cur->tid : -1);
    return buf;
}

// ds_bpermute_b32 over the active lanes: lane reads lane (index & (width - 1)) of its wavefront; site: the
// shuffle's call site (HIP's __shfl* below are noinline and pass their return address, so every call in a kernel,
// inlined through ggml's __forceinline__ helpers, is its own site at any optimization level)
inline uint32_t bpermute(int index, uint32_t value, const void * site) {
    Lane * me = rt().cur;
    me->index = index;
    me->value = value;
    yield(State::shuffle, site);
    return me->result;
}

inline uint64_t ballot(int pred, const void * site) {
    Lane * me = rt().cur;
    me->value = pred != 0;
    yield(State::ballot, site);
    return me->mask;
}

// resolve the cross-lane operations of one wavefront [w0, w1): true when some lanes were released
inline bool resolve_wave(Runtime & r, int w0, int w1) {
    bool released = false;
    for (int i = w0; i < w1; ++i) {
        Lane & a = r.lanes[i];
        if (a.state != State::shuffle && a.state != State::ballot) {
            continue;
        }
        const State kind = a.state;
        const void * site = a.site;
        // the group: lanes of this wave at the same site
        uint64_t group = 0;
        for (int j = w0; j < w1; ++j) {
            if (r.lanes[j].state == kind && r.lanes[j].site == site) {
                group |= 1ull << (j - w0);
            }
        }
        // wait while a source is still at another cross-lane site (it may reconverge here)
        bool wait = false;
        if (kind == State::shuffle) {
            for (int j = w0; j < w1 && !wait; ++j) {
                if (!(group >> (j - w0) & 1)) {
                    continue;
                }
                const int src = r.lanes[j].index & (WAVE64_WIDTH - 1);
                if (w0 + src < w1 && !(group >> src & 1)) {
                    // (run: released from another group in this pass, on its way; a lane at a barrier or
                    // done is not coming: reading it reads an inactive lane)
                    const State s = r.lanes[w0 + src].state;
                    wait = s == State::shuffle || s == State::ballot || s == State::run;
                }
            }
        }
        if (wait) {
            continue;
        }
        for (int j = w0; j < w1; ++j) {
            if (!(group >> (j - w0) & 1)) {
                continue;
            }
            Lane & l = r.lanes[j];
            if (kind == State::shuffle) {
                const int src = l.index & (WAVE64_WIDTH - 1);
                if (w0 + src < w1 && (group >> src & 1)) {
                    l.result = r.lanes[w0 + src].value;
                } else {
                    l.result = 0;  // an inactive source reads as 0 (ds_bpermute)
                    char buf[160];
                    snprintf(buf, sizeof(buf), "block (%u,%u,%u): lane %d of wave %d reads inactive lane %d",
                             r.launch.block_idx.x, r.launch.block_idx.y, r.launch.block_idx.z, j - w0,
                             w0 / WAVE64_WIDTH, src);
                    fault(buf);
                }
            } else {
                uint64_t m = 0;
                for (int k = w0; k < w1; ++k) {
                    if ((group >> (k - w0) & 1) && r.lanes[k].value) {
                        m |= 1ull << (k - w0);
                    }
                }
                l.mask = m;
            }
            l.state = State::run;
            released = true;
        }
    }
    return released;
}

inline void run_block(Runtime & r, int n_threads) {
    const dim3 bd = r.launch.block;
    for (int t = 0; t < n_threads; ++t) {
        Lane & l = r.lanes[t];
        l.tid = t;
        l.thread_idx = dim3(t % bd.x, (t / bd.x) % bd.y, t / (bd.x * bd.y));
        start_fiber(l);
    }
    for (;;) {
        bool ran = false;
        for (int k = 0; k < n_threads; ++k) {
            const int t = r.launch.reversed ? n_threads - 1 - k : k;
            Lane & l = r.lanes[t];
            if (l.state == State::run) {
                r.cur = &l;
                wave64_swap(&r.sched_sp, l.sp);
                r.cur = nullptr;
                ran = true;
            }
        }
        (void) ran;
        bool released = false;
        bool pending = false;
        for (int w0 = 0; w0 < n_threads; w0 += WAVE64_WIDTH) {
            const int w1 = std::min(n_threads, w0 + WAVE64_WIDTH);
            released |= resolve_wave(r, w0, w1);
            for (int j = w0; j < w1; ++j) {
                pending |= r.lanes[j].state == State::shuffle || r.lanes[j].state == State::ballot;
            }
        }
        if (released) {
            continue;
        }
        if (pending) {  // every group waits on another: release them all, reads of the others fault
            for (int w0 = 0; w0 < n_threads; w0 += WAVE64_WIDTH) {
                const int w1 = std::min(n_threads, w0 + WAVE64_WIDTH);
                for (int j = w0; j < w1; ++j) {
                    Lane & l = r.lanes[j];
                    if (l.state == State::shuffle) {
                        const int src = l.index & (WAVE64_WIDTH - 1);
                        const bool same = w0 + src < w1 && r.lanes[w0 + src].state == State::shuffle &&
                                          r.lanes[w0 + src].site == l.site;
                        l.result = same ? r.lanes[w0 + src].value : 0;
                        if (!same) {
                            fault("cross-lane groups wait on each other (divergent shuffles)");
                        }
                        l.state = State::run;
                    } else if (l.state == State::ballot) {
                        l.mask = 0;
                        fault("divergent ballot");
                        l.state = State::run;
                    }
                }
            }
            continue;
        }
        // barrier: every live thread waits at one
        const void * site = nullptr;
        bool any = false;
        for (int t = 0; t < n_threads; ++t) {
            Lane & l = r.lanes[t];
            if (l.state == State::barrier) {
                if (any && l.site != site) {
                    fault("threads wait at different __syncthreads");
                }
                site = l.site;
                any = true;
                l.state = State::run;
            }
        }
        if (!any) {
            break;  // all done
        }
    }
}

// run a kernel body for every block of the grid, its threads as fibers
inline void run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> & body) {
    Runtime & r = rt();
    const long long n = (long long) block.x * block.y * block.z;
    if (n <= 0 || n > kMaxThreads) {
        fault("bad block size " + std::to_string(n));
        return;
    }
    if (smem > 64 * 1024) {  // gfx90a: 64 KiB of LDS per workgroup
        fault("dynamic shared memory " + std::to_string(smem) + " bytes over gfx90a's 64 KiB");
        return;
    }
    r.launch.grid = grid;
    r.launch.block = block;
    r.launch.smem = smem;
    r.launch.reversed = r.reversed;
    r.body = body;
    r.smem.assign(smem + 16, 0);
    r.launches++;
    for (unsigned z = 0; z < grid.z; ++z) {
        for (unsigned y = 0; y < grid.y; ++y) {
            for (unsigned x = 0; x < grid.x; ++x) {
                r.launch.block_idx = dim3(x, y, z);
                const float nan = std::numeric_limits<float>::quiet_NaN();
                for (size_t i = 0; i + 4 <= r.smem.size(); i += 4) {
                    memcpy(&r.smem[i], &nan, 4);
                }
                run_block(r, (int) n);
                r.blocks++;
            }
        }
    }
}

inline void * dynamic_shared() {
    return rt().smem.data();
}

// device memory: the buffer ends 256-byte aligned right below a guard page
inline void * device_alloc(size_t bytes) {
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    const size_t used = (bytes + 255) & ~(size_t) 255;
    const size_t span = (used + page - 1) / page * page;
    char * p = (char *) mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return nullptr;
    }
    mprotect(p + span, page, PROT_NONE);
    return p + span - used;
}

inline void device_free(void * ptr) {
    (void) ptr;  // kept mapped: a use after free reads stale data rather than crashing the harness
}

template <typename... P>
struct Launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    template <typename... A>
    void operator()(A &&... a) const {
        std::tuple<std::decay_t<P>...> args(static_cast<std::decay_t<P>>(std::forward<A>(a))...);
        auto k = kernel;
        run_grid(grid, block, smem, [&args, k]() { std::apply(k, args); });
    }
};

}  // namespace wave64

template <typename... P, typename S = void *>
wave64::Launcher<P...> wave64_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0, S = nullptr) {
    return {kernel, grid, block, smem};
}

// ---- built-in variables --------------------------------------------------------------------------------------

#define threadIdx (::wave64::rt().cur->thread_idx)
#define blockIdx (::wave64::rt().launch.block_idx)
#define blockDim (::wave64::rt().launch.block)
#define gridDim (::wave64::rt().launch.grid)

__attribute__((noinline)) static void __syncthreads() {
    ::wave64::yield(::wave64::State::barrier, __builtin_return_address(0));
}
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static inline int __lane_id() { return ::wave64::lane_id(); }

// ---- cross-lane operations: HIP's formulas (amd_warp_functions.h) over ds_bpermute ---------------------------

template <typename T>
static inline T __wave64_bperm(int index, T v, const void * site) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- or 64-bit values");
    if constexpr (sizeof(T) == 4) {
        uint32_t u;
        memcpy(&u, &v, 4);
        u = ::wave64::bpermute(index, u, site);
        T r;
        memcpy(&r, &u, 4);
        return r;
    } else {
        uint32_t u[2];
        memcpy(u, &v, 8);
        u[0] = ::wave64::bpermute(index, u[0], site);
        u[1] = ::wave64::bpermute(index, u[1], site);
        T r;
        memcpy(&r, u, 8);
        return r;
    }
}
template <typename T>
__attribute__((noinline)) static T __shfl(T var, int src_lane, int width = warpSize) {
    const int self = __lane_id();
    const int index = (src_lane & (width - 1)) + (self & ~(width - 1));
    return __wave64_bperm(index, var, __builtin_return_address(0));
}
template <typename T>
__attribute__((noinline)) static T __shfl_up(T var, unsigned int lane_delta, int width = warpSize) {
    const int self = __lane_id();
    int index = self - (int) lane_delta;
    index = (index < (self & ~(width - 1))) ? self : index;
    return __wave64_bperm(index, var, __builtin_return_address(0));
}
template <typename T>
__attribute__((noinline)) static T __shfl_down(T var, unsigned int lane_delta, int width = warpSize) {
    const int self = __lane_id();
    int index = self + (int) lane_delta;
    index = (int) ((self & (width - 1)) + lane_delta) >= width ? self : index;
    return __wave64_bperm(index, var, __builtin_return_address(0));
}
template <typename T>
__attribute__((noinline)) static T __shfl_xor(T var, int lane_mask, int width = warpSize) {
    const int self = __lane_id();
    int index = self ^ lane_mask;
    index = index >= ((self + width) & ~(width - 1)) ? self : index;
    return __wave64_bperm(index, var, __builtin_return_address(0));
}
__attribute__((noinline)) static unsigned long long __ballot(int pred) {
    return ::wave64::ballot(pred, __builtin_return_address(0));
}
__attribute__((noinline)) static int __all(int pred) {
    const void * site = __builtin_return_address(0);
    const uint64_t m = ::wave64::ballot(1, site);
    return ::wave64::ballot(pred, site) == m;
}
__attribute__((noinline)) static int __any(int pred) {
    return ::wave64::ballot(pred, __builtin_return_address(0)) != 0;
}
__attribute__((noinline)) static unsigned long long __activemask() {
    return ::wave64::ballot(1, __builtin_return_address(0));
}
__attribute__((noinline)) static int __builtin_amdgcn_ds_bpermute_w64(int addr, int v) {
    return (int) ::wave64::bpermute(addr >> 2, (uint32_t) v, __builtin_return_address(0));
}
#define __builtin_amdgcn_ds_bpermute(addr, v) __builtin_amdgcn_ds_bpermute_w64((addr), (v))

// ---- integer and float intrinsics ----------------------------------------------------------------------------

static inline int __builtin_amdgcn_sdot4_w64(int a, int b, int c, bool) {
    const int8_t * x = (const int8_t *) &a;
    const int8_t * y = (const int8_t *) &b;
    return c + x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
}
#define __builtin_amdgcn_sdot4(a, b, c, clamp) __builtin_amdgcn_sdot4_w64((a), (b), (c), (clamp))
static inline uint32_t __builtin_amdgcn_perm_w64(uint32_t hi, uint32_t lo, uint32_t sel) {
    // v_perm_b32: bytes of {hi:lo}, selector bytes 0..7 pick, 0x0c -> 0x00, 0x0d -> 0xff (others not used here)
    const uint64_t v = ((uint64_t) hi << 32) | lo;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) {
        const uint32_t s = (sel >> (8 * i)) & 0xff;
        uint32_t b = s < 8 ? (uint32_t) (v >> (8 * s)) & 0xff : s == 0x0c ? 0 : 0xff;
        r |= b << (8 * i);
    }
    return r;
}
#define __builtin_amdgcn_perm(hi, lo, sel) __builtin_amdgcn_perm_w64((hi), (lo), (sel))
#define __builtin_amdgcn_sched_group_barrier(...) ((void) 0)
#define __builtin_amdgcn_s_waitcnt(...) ((void) 0)

static inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    unsigned char c[8];
    memcpy(c, &x, 4);
    memcpy(c + 4, &y, 4);
    unsigned int r = c[s & 7];
    r |= (unsigned int) c[(s >> 4) & 7] << 8;
    r |= (unsigned int) c[(s >> 8) & 7] << 16;
    r |= (unsigned int) c[(s >> 12) & 7] << 24;
    return r;
}
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float f) { int x; memcpy(&x, &f, 4); return x; }
static inline float __uint_as_float(unsigned int x) { float f; memcpy(&f, &x, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int x; memcpy(&x, &f, 4); return x; }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned) x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int) (((unsigned long long) a * b) >> 32);
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long) (((unsigned __int128) a * b) >> 64);
}
static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int s) {
    return (unsigned int) ((((unsigned long long) hi << 32) | lo) >> (s & 31));
}
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int s) {
    return (unsigned int) (((((unsigned long long) hi << 32) | lo) << (s & 31)) >> 32);
}
static inline long long clock64() { return 0; }
static inline long long wall_clock64() { return 0; }

// CUDA/HIP's global min and max over mixed integer arguments
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline uint64_t min(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t max(uint64_t a, uint64_t b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

// atomics: the lanes run one at a time, so plain read-modify-writes are atomic
template <typename T> static inline T atomicAdd(T * p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static inline T atomicMax(T * p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <typename T> static inline T atomicMin(T * p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <typename T> static inline T atomicExch(T * p, T v) { T o = *p; *p = v; return o; }
template <typename T> static inline T atomicCAS(T * p, T c, T v) { T o = *p; if (o == c) { *p = v; } return o; }

#ifdef WAVE64_IMPLEMENTATION
// wave64_swap(save, load): save the callee-saved state on this stack and its pointer to *save, continue on load
__asm__(R"(
    .text
    .globl wave64_swap
    .type wave64_swap, @function
wave64_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size wave64_swap, .-wave64_swap
    .section .note.GNU-stack,"",@progbits
    .text
)");
#endif
