// pyllama90a wave64 harness: our HIP kernels, compiled as HIP for gfx90a and run on the CPU with 64-wide
// wavefronts (wave64.h), against a CPU reference in double precision over ggml's own CPU decoding of the cache.
//
// Cases (tests/test_hybrid_attention.py's fused-kernel cases):
// - attn/<kernel>/<shape>/<type>: FLASH_ATTN_EXT marked for the fused decode (patch 0013, rotations folded as
//   0015, q in 8 bits as 0016 with 0024's two buffers and split), through
//   ggml_cuda_pyl_attn_decode, its shape and split chosen by the real host code for an MI210 (104 CUs): one
//   token over 768 cells of which 607 are unmasked. q8-4cu and q8-1cu: q8 on a device of 4 and
//   1 CUs, whose splits give a block several tiles (with and without the split-KV reduce); q8-short: a 256-cell
//   view with 151 unmasked, fewer than one tile of one KV head holds; q8-9seq-4cu: 9 sequences, a KV stream each
//   with its own mask, past one wave of blocks (ATTN_CASES). q8's V^T p is in half2 (patch 0026: p in half,
//   summed in half over a tile, in F32 across tiles), so its bound allows for half's rounding.
//   Reference: q scaled and rotated, rounded to 8 bits per 32 values as the kernel's q8, scores
//   against ggml's dequantized K plus the mask, softmax, V, the output rotated. Error: max |got - want| over
//   max |want|.
// - store/<shape>/<type>/<n>: a layer's K and V SET_ROWS marked ROTATE_ROWS (0015, 32 lanes per block as 0017),
//   through ggml_cuda_pyl_set_rows_rot, K and V in one launch (0041), n tokens. Reference:
//   the rows rotated in double, quantized by ggml's CPU quantizer. Error: the largest code difference in steps
//   of the block's scale (rounding ties may move one code by one step), and the share of differing values.
// - store-rope/<shape>/<type>/<rope>: the same, K's rows the view of a ROPE node that the launch applies itself
//   (patch 0043), rope_norm's mode, or rope_neox's over half the channels with YaRN and frequency factors.
//   Reference: RoPE in double (YaRN's ramp and scale; corr dims from ggml), then as above.
// - outprod/<shape>/<type>: the non-flash decode's OUT_PROD over a quantized V (patch 0004's kernels: one token,
//   KV chunks and their reduce), through ggml_cuda_out_prod. Reference: sum of p times ggml's dequantized V.
// - selftest/...: our own small kernels, one right and two wrong on 64-wide wavefronts only (a group-of-32
//   reduction whose partial sums are published by `threadIdx.x % warpSize == 0`, a broadcast with the
//   default width): the harness must pass the first and fail the others.
// Every case runs twice, lanes forward and reversed between sync points: the two results must be equal bit
// for bit (else a race), and the runtime must record no fault (reads of inactive lanes, divergent barriers).
#define WAVE64_IMPLEMENTATION
#include "wave64.h"

#include "pyl-attn-decode.cu"  // the fused decode's dispatch by type; its five per-type units (patch 0027):
#include "pyl-attn-decode-q4_0.cu"
#include "pyl-attn-decode-q4_1.cu"
#include "pyl-attn-decode-q5_0.cu"
#include "pyl-attn-decode-q5_1.cu"
#include "pyl-attn-decode-q8_0.cu"
#include "pyl-set-rows-rot.cu"
#include "out-prod.cu"

#include "ggml.h"

#include <random>

// ---- the host symbols of ggml-cuda.cu that the units use: one MI210 --------------------------------------

constexpr int MI210_CUS = 104;  // its compute units

ggml_cuda_device_info & harness_info() {
    static ggml_cuda_device_info info = [] {
        ggml_cuda_device_info i = {};
        i.device_count = i.physical_device_count = 1;
        i.devices[0].cc = GGML_CUDA_CC_CDNA2;
        i.devices[0].nsm = MI210_CUS;
        i.devices[0].smpb = i.devices[0].smpbo = 64 * 1024;
        i.devices[0].warp_size = WAVE64_WIDTH;
        i.devices[0].total_vram = (size_t) 64 << 30;
        return i;
    }();
    return info;
}

const ggml_cuda_device_info & ggml_cuda_info() {
    return harness_info();
}

void ggml_cuda_set_device(int) {}

[[noreturn]] void ggml_cuda_error(const char * stmt, const char * func, const char * file, int line, const char * msg) {
    fprintf(stderr, "wave64 harness: %s failed in %s (%s:%d): %s\n", stmt, func, file, line, msg);
    abort();
}

struct wave64_pool : ggml_cuda_pool {
    void * alloc(size_t size, size_t * actual) override {
        *actual = size;
        return wave64::device_alloc(size);
    }
    void free(void * ptr, size_t) override { wave64::device_free(ptr); }
};

std::unique_ptr<ggml_cuda_pool> ggml_backend_cuda_context::new_pool_for_device(int, int) {
    return std::make_unique<wave64_pool>();
}

ggml_backend_cuda_context::~ggml_backend_cuda_context() {}

// ---- helpers ---------------------------------------------------------------------------------------------

namespace {

struct Result {
    bool pass = false;
    bool expect_fail = false;
    double error = 0, bound = 0;
    std::string detail;
};

template <typename T> T * dev(size_t n) { return (T *) wave64::device_alloc(n * sizeof(T)); }

// the larger error, a NaN counting as infinite (std::max would keep the first argument)
double worst(double e, double x) {
    return std::isnan(x) || std::isnan(e) ? INFINITY : std::max(e, x);
}

// x <- H x / sqrt(n) in pieces of n (Sylvester order: what llama.cpp's rotation matrices and the kernels use)
void fwht(std::vector<double> & x, size_t off, int n) {
    for (int h = 1; h < n; h *= 2) {
        for (int i = 0; i < n; i += 2 * h) {
            for (int j = i; j < i + h; ++j) {
                const double a = x[off + j], b = x[off + j + h];
                x[off + j] = a + b;
                x[off + j + h] = a - b;
            }
        }
    }
    for (int i = 0; i < n; ++i) {
        x[off + i] /= std::sqrt((double) n);
    }
}

std::vector<float> to_float(ggml_type type, const void * row, int64_t n) {
    std::vector<float> out(n);
    ggml_get_type_traits(type)->to_float(row, out.data(), n);
    return out;
}

struct Shape {
    const char * name;
    int D, n_head, n_head_kv;
};
// tests/test_hybrid_attention.py's FUSED_SHAPES: head dim n_embd/n_head, query and KV heads
const Shape SHAPES[] = {
    {"hd64-gqa2", 64, 4, 2},
    {"hd128-gqa4", 128, 4, 1},
    {"hd64-gqa8", 64, 8, 1},
    {"hd256-mha", 256, 2, 2},
    {"hd128-kv8", 128, 16, 8},
};
const ggml_type TYPES[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0};

constexpr int KV_SIZE = 1024;  // the test's n_ctx
constexpr int N_KV    = 768;   // the cache view of a decode step there (llama.cpp pads n_kv to 256)
constexpr int N_USED  = 607;   // 2 x 301 prompt tokens and the decode steps before the last

// the fused kernel's cases: a device of cus CUs, a cache view of n_kv cells of which n_used are unmasked; rotated:
// over a rotated cache with the rotations folded (0015: the kernel rotates q and the output), else q and the output
// as they are (fold_rotations off, or a cache llama.cpp does not rotate)
struct AttnCase {
    const char * name;
    int cus, n_kv, n_used;
    bool rotated = true;
    int n_seq = 1;  // sequences decoding together, a KV stream each (sequence s uses n_used - 37*s cells)
};
const AttnCase ATTN_CASES[] = {
    {"q8", MI210_CUS, N_KV, N_USED},
    {"q8-4cu", 4, N_KV, N_USED},       // the split gives a block several tiles
    {"q8-1cu", 1, N_KV, N_USED},       // no split: one chunk of several tiles
    {"q8-short", MI210_CUS, 256, 151},  // the depth where a chat starts
    {"q8-unrotated", MI210_CUS, N_KV, N_USED, false},
    // 9 sequences, a KV stream each, on 4 CUs (8 blocks a wave): past one wave, the host's layout there (0055: the
    // first 8 sequences whole in a launch of their own, the 9th split in a second launch and its reduce)
    {"q8-9seq-4cu", 4, N_KV, N_USED, true, 9},
};

struct Ctx {
    ggml_context * ctx;
    Ctx() {
        ggml_init_params p = {64 * 1024 * 1024, nullptr, true};
        ctx = ggml_init(p);
    }
    ~Ctx() { ggml_free(ctx); }
};

// a quantized cache [n_embd_gqa, KV_SIZE] with rows 0..N_KV-1 from normal values (per-head scales vary)
void * make_cache(ggml_type type, int n_embd, std::mt19937_64 & rng, std::vector<float> * src_out = nullptr,
                  int n_streams = 1) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> src((size_t) n_embd * KV_SIZE * n_streams);
    for (size_t i = 0; i < src.size(); ++i) {
        src[i] = nd(rng) * (1.0f + 0.5f * (float) ((i % n_embd) / 64 % 3));
    }
    void * data = wave64::device_alloc(ggml_row_size(type, n_embd) * KV_SIZE * n_streams);
    ggml_quantize_chunk(type, src.data(), data, 0, (int64_t) KV_SIZE * n_streams, n_embd, nullptr);
    if (src_out) {
        *src_out = std::move(src);
    }
    return data;
}

// ---- the fused decode -------------------------------------------------------------------------------------

struct AttnOut {
    std::vector<float> out;
    std::vector<std::string> faults;
};

AttnOut run_attn(ggml_tensor * dst, bool reversed) {
    auto & r = wave64::rt();
    r.faults.clear();
    r.reversed = reversed;
    memset(dst->data, 0xff, ggml_nbytes(dst));
    ggml_backend_cuda_context cctx(0);
    ggml_cuda_pyl_attn_decode(cctx, dst);
    const float * d = (const float *) dst->data;
    return {std::vector<float>(d, d + ggml_nelements(dst)), r.faults};
}

Result attn_case(const AttnCase & a, const Shape & s, ggml_type type) {
    Result res;
    const int n_kv = a.n_kv, n_used = a.n_used;
    struct CUs {  // restored when the case ends, whichever way
        explicit CUs(int n) { harness_info().devices[0].nsm = n; }
        ~CUs() { harness_info().devices[0].nsm = MI210_CUS; }
    } cus_of_case(a.cus);
    std::mt19937_64 rng(1234 + s.D * 7 + s.n_head * 13 + (int) type);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int D = s.D, n_embd = D * s.n_head_kv, G = s.n_head / s.n_head_kv, n_seq = a.n_seq;
    const auto used_of = [&](int seq) { return n_used - 37 * seq; };  // each stream's mask its own
    Ctx c;
    void * kdata = make_cache(type, n_embd, rng, nullptr, n_seq);
    void * vdata = make_cache(type, n_embd, rng, nullptr, n_seq);
    const size_t row = ggml_row_size(type, n_embd), rd = ggml_row_size(type, D);
    ggml_tensor * kc = ggml_new_tensor_3d(c.ctx, type, n_embd, KV_SIZE, n_seq);
    ggml_tensor * vc = ggml_new_tensor_3d(c.ctx, type, n_embd, KV_SIZE, n_seq);
    kc->data = kdata;
    vc->data = vdata;
    ggml_tensor * k = ggml_view_4d(c.ctx, kc, D, n_kv, s.n_head_kv, n_seq, row, rd, row * KV_SIZE, 0);
    ggml_tensor * v = ggml_view_4d(c.ctx, vc, D, n_kv, s.n_head_kv, n_seq, row, rd, row * KV_SIZE, 0);
    ggml_tensor * qc = ggml_new_tensor_3d(c.ctx, GGML_TYPE_F32, D, s.n_head, n_seq);
    qc->data = dev<float>((size_t) D * s.n_head * n_seq);
    for (int i = 0; i < D * s.n_head * n_seq; ++i) {
        ((float *) qc->data)[i] = nd(rng);
    }
    // q as build_attn_mha permutes it: [D, 1 token, n_head, n_seq]
    ggml_tensor * q = ggml_view_4d(c.ctx, qc, D, 1, s.n_head, n_seq, (size_t) D * s.n_head * 4, (size_t) D * 4,
                                   (size_t) D * s.n_head * 4, 0);
    ggml_tensor * mask = ggml_new_tensor_4d(c.ctx, GGML_TYPE_F16, n_kv, 1, 1, n_seq);
    mask->data = dev<ggml_fp16_t>((size_t) n_kv * n_seq);
    for (int seq = 0; seq < n_seq; ++seq) {
        for (int j = 0; j < n_kv; ++j) {
            ((ggml_fp16_t *) mask->data)[seq * n_kv + j] = ggml_fp32_to_fp16(j < used_of(seq) ? 0.0f : -INFINITY);
        }
    }
    const float scale = 1.0f / sqrtf((float) D);
    ggml_tensor * dst = ggml_flash_attn_ext(c.ctx, q, k, v, mask, scale, 0.0f, 0.0f);
    dst->data = dev<float>(ggml_nelements(dst));
    // llama.cpp's rotation sizes: K the largest power of 2 dividing D, V 64
    const int rot_q = a.rotated ? D : 0, rot_out = a.rotated ? 64 : 0;
    const int32_t mark = GGML_PYL_MARK_FUSED_DECODE | (a.rotated ? GGML_PYL_MARK_ROTATED |
                         GGML_PYL_ROT_SIZES(__builtin_ctz(rot_q), __builtin_ctz(rot_out)) : 0);
    ggml_pyl_set_mark(dst, mark);
    if (!ggml_cuda_pyl_attn_decode_supported(dst)) {
        res.detail = "not supported by the fused kernel";
        return res;
    }

    const AttnOut fwd = run_attn(dst, false);
    const long long blocks0 = wave64::rt().blocks, launches0 = wave64::rt().launches;
    const AttnOut rev = run_attn(dst, true);
    const long long blocks = wave64::rt().blocks - blocks0, launches = wave64::rt().launches - launches0;

    // reference: per sequence and query head h (KV head h / G of the sequence's stream)
    double err = 0, amax = 0, err_exact = 0;
    for (int hs = 0; hs < s.n_head * n_seq; ++hs) {
        const int h = hs % s.n_head, seq = hs / s.n_head, used = used_of(seq);
        const int hk = h / G;
        const char * kstream = (const char *) kdata + (size_t) seq * KV_SIZE * row;
        const char * vstream = (const char *) vdata + (size_t) seq * KV_SIZE * row;
        std::vector<double> qr(D);
        std::vector<float> qf(D);
        for (int d = 0; d < D; ++d) {
            qf[d] = scale * ((const float *) qc->data)[hs * D + d];  // scaled in float, as the kernel
            qr[d] = qf[d];
        }
        if (rot_q) {
            fwht(qr, 0, rot_q);
        }
        std::vector<double> qx = qr;  // exact
        for (int b = 0; b < D / 32; ++b) {  // 8 bits per 32 values: d = amax/127, code = round(x/d)
            float am = 0;
            for (int i = 0; i < 32; ++i) {
                am = std::max(am, std::fabs((float) qr[b * 32 + i]));
            }
            const float dq = am / 127.0f;
            for (int i = 0; i < 32; ++i) {
                qr[b * 32 + i] = am == 0.0f ? 0.0 : dq * (double) roundf((float) qr[b * 32 + i] / dq);
            }
        }
        std::vector<double> sc(n_kv), scx(n_kv);
        double mx = -INFINITY, mxx = -INFINITY;
        for (int j = 0; j < n_kv; ++j) {
            if (j >= used) {
                sc[j] = scx[j] = -INFINITY;
                continue;
            }
            const std::vector<float> kr = to_float(type, kstream + j * row + hk * rd, D);
            double dot = 0, dotx = 0;
            for (int d = 0; d < D; ++d) {
                dot += qr[d] * kr[d];
                dotx += qx[d] * kr[d];
            }
            sc[j] = dot;
            scx[j] = dotx;
            mx = std::max(mx, dot);
            mxx = std::max(mxx, dotx);
        }
        std::vector<double> o(D, 0.0), ox(D, 0.0);
        double l = 0, lx = 0;
        for (int j = 0; j < used; ++j) {
            const std::vector<float> vr = to_float(type, vstream + j * row + hk * rd, D);
            const double p = std::exp(sc[j] - mx), px = std::exp(scx[j] - mxx);
            l += p;
            lx += px;
            for (int d = 0; d < D; ++d) {
                o[d] += p * vr[d];
                ox[d] += px * vr[d];
            }
        }
        for (int d = 0; d < D; ++d) {
            o[d] /= l;
            ox[d] /= lx;
        }
        for (int p0 = 0; rot_out && p0 < D; p0 += rot_out) {
            fwht(o, p0, rot_out);
            fwht(ox, p0, rot_out);
        }
        for (int d = 0; d < D; ++d) {
            const double got = fwd.out[hs * D + d];  // dst [D, n_head, 1, n_seq]
            err = worst(err, std::fabs(got - o[d]));
            err_exact = worst(err_exact, std::fabs(got - ox[d]));
            amax = std::max(amax, std::fabs(o[d]));
        }
    }
    bool same = fwd.out.size() == rev.out.size() &&
                !memcmp(fwd.out.data(), rev.out.data(), fwd.out.size() * sizeof(float));
    res.error = err / amax;
    // float sums in another order; a lane or group read at the wrong place is O(1). q8's V^T p in half2 (0026):
    // p, p*d and a tile's sums rounded to half (2^-11 relative each), up to ~8 of its ulps over a tile's cells
    res.bound = 4e-3;
    std::vector<std::string> faults = fwd.faults;
    faults.insert(faults.end(), rev.faults.begin(), rev.faults.end());
    res.pass = std::isfinite(res.error) && res.error <= res.bound && same && faults.empty();
    char buf[256];
    snprintf(buf, sizeof(buf), "%s, %lld blocks, error vs F32-q reference %.2e%s%s%s",
             launches == 3 ? "whole sequences, then split KV + reduce" :
             launches == 2 ? "split KV + reduce" : "one chunk per head group", blocks, err_exact / amax,
             same ? "" : ", forward and reversed lane orders differ", faults.empty() ? "" : ", fault: ",
             faults.empty() ? "" : faults[0].c_str());
    res.detail = buf;
    return res;
}

// ---- the K/V stores ---------------------------------------------------------------------------------------

struct Store {
    ggml_tensor * node;
    void * data;
    std::vector<float> src;  // [n_tokens][n_embd]
    int N;
};

// a ROPE whose output K's store views (patch 0043): the launch applies it in place of the node
struct RopeCase {
    const char * name;
    int mode;        // GGML_ROPE_TYPE_NORMAL or _NEOX
    int dims_div;    // n_dims = D / dims_div (the rest pass through)
    bool freq_factors;
    float freq_scale, ext_factor;
};
const RopeCase ROPE_CASES[] = {
    {"norm", GGML_ROPE_TYPE_NORMAL, 1, false, 1.0f, 0.0f},
    {"neox-half-yarn-ff", GGML_ROPE_TYPE_NEOX, 2, true, 0.25f, 1.0f},
};
constexpr float ROPE_BASE = 10000.0f, ROPE_ATTN_FACTOR = 0.9f, ROPE_BETA_FAST = 32.0f, ROPE_BETA_SLOW = 1.0f;
constexpr int ROPE_CTX_ORIG = 4096;

// row t's values (heads of D) after RoPE at pos, in double: ggml's rope_yarn for each pair. The pair's angle
// before YaRN is ggml-cuda's float one (pos times theta_scale^k, theta_scale a float): in double it moves by up to
// ~3e-4 rad at 4.5K positions, which moves a few percent of the codes by a step
std::vector<double> rope_ref(const RopeCase & rc, const std::vector<double> & x, int D, int pos, const float * ff) {
    const int n_dims = D / rc.dims_div;
    float corr[2];
    ggml_rope_yarn_corr_dims(n_dims, ROPE_CTX_ORIG, ROPE_BASE, ROPE_BETA_FAST, ROPE_BETA_SLOW, corr);
    const float theta_scale = powf(ROPE_BASE, -2.0f / n_dims);
    std::vector<double> y = x;
    for (size_t h = 0; h < x.size(); h += D) {
        for (int k = 0; k < n_dims / 2; ++k) {
            const double extrap = (double) (pos * powf(theta_scale, (float) k)) / (ff ? ff[k] : 1.0);
            double theta = rc.freq_scale * extrap, mscale = ROPE_ATTN_FACTOR;
            if (rc.ext_factor != 0.0f) {
                const double ramp = 1.0 - std::min(1.0, std::max(0.0, (k - corr[0]) / std::max(0.001, (double) corr[1] - corr[0])));
                const double mix = ramp * rc.ext_factor;
                theta = theta * (1 - mix) + extrap * mix;
                mscale *= 1.0 + 0.1 * std::log(1.0 / rc.freq_scale);
            }
            const size_t i0 = h + (rc.mode == GGML_ROPE_TYPE_NEOX ? k : 2 * k);
            const size_t i1 = i0 + (rc.mode == GGML_ROPE_TYPE_NEOX ? n_dims / 2 : 1);
            const double c = std::cos(theta) * mscale, sn = std::sin(theta) * mscale;
            y[i0] = x[i0] * c - x[i1] * sn;
            y[i1] = x[i0] * sn + x[i1] * c;
        }
    }
    return y;
}

Result store_case(const Shape & s, ggml_type type, int n_tokens, const RopeCase * rc = nullptr) {
    Result res;
    std::mt19937_64 rng(99 + s.D * 3 + s.n_head_kv * 5 + (int) type + n_tokens);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int D = s.D, n_embd = D * s.n_head_kv;
    const size_t row = ggml_row_size(type, n_embd);
    Ctx c;
    ggml_tensor * idx = ggml_new_tensor_1d(c.ctx, GGML_TYPE_I64, n_tokens);
    idx->data = dev<int64_t>(n_tokens);
    for (int t = 0; t < n_tokens; ++t) {
        ((int64_t *) idx->data)[t] = 600 + 3 * t;  // cells after a 600-cell prompt, not neighbours
    }
    // positions far from each other and from 0 (the angles of the later pairs too)
    ggml_tensor * pos = ggml_new_tensor_1d(c.ctx, GGML_TYPE_I32, n_tokens);
    pos->data = dev<int32_t>(n_tokens);
    for (int t = 0; t < n_tokens; ++t) {
        ((int32_t *) pos->data)[t] = 600 + 977 * t;
    }
    ggml_tensor * ff = nullptr;
    if (rc && rc->freq_factors) {
        ff = ggml_new_tensor_1d(c.ctx, GGML_TYPE_F32, D / rc->dims_div / 2);
        ff->data = dev<float>(ff->ne[0]);
        for (int k = 0; k < ff->ne[0]; ++k) {
            ((float *) ff->data)[k] = 1.0f + 0.37f * (float) (k % 5);
        }
    }
    ggml_tensor * rope = nullptr;
    Store st[2];
    for (int kv = 0; kv < 2; ++kv) {
        Store & x = st[kv];
        x.N = kv == 0 ? D : 64;  // K's rotation piece (the largest power of 2 dividing D), V's 64
        ggml_tensor * cache = ggml_new_tensor_2d(c.ctx, type, n_embd, KV_SIZE);
        x.data = cache->data = wave64::device_alloc(row * KV_SIZE);
        memset(x.data, 0x5a, row * KV_SIZE);
        ggml_tensor * src = ggml_new_tensor_2d(c.ctx, GGML_TYPE_F32, n_embd, n_tokens);
        src->data = dev<float>((size_t) n_embd * n_tokens);
        x.src.resize((size_t) n_embd * n_tokens);
        for (size_t i = 0; i < x.src.size(); ++i) {
            x.src[i] = ((float *) src->data)[i] = nd(rng) * (i % 97 == 0 ? 6.0f : 1.0f);
        }
        ggml_tensor * rows = src;
        if (rc && kv == 0) {  // K: the view of RoPE over src as [D, heads, tokens], as the graph's builder makes it
            rope = ggml_rope_ext(c.ctx, ggml_reshape_3d(c.ctx, src, D, s.n_head_kv, n_tokens), pos, ff,
                                 D / rc->dims_div, rc->mode, ROPE_CTX_ORIG, ROPE_BASE, rc->freq_scale, rc->ext_factor,
                                 ROPE_ATTN_FACTOR, ROPE_BETA_FAST, ROPE_BETA_SLOW);
            rows = ggml_view_2d(c.ctx, rope, n_embd, n_tokens, rope->nb[2], 0);
        }
        x.node = ggml_set_rows(c.ctx, cache, rows, idx);
        GGML_PYL_ROTATE_N(x.node) = x.N;
        ggml_pyl_set_mark(x.node, GGML_PYL_MARK_ROTATE_ROWS);
        if (!ggml_cuda_pyl_set_rows_rot_supported(x.node) || (rope && kv == 0 && !ggml_cuda_pyl_set_rows_rot_ropes(rope, x.node))) {
            res.detail = "not supported";
            return res;
        }
    }
    std::vector<unsigned char> outs[2];
    std::vector<std::string> faults;
    for (int pass = 0; pass < 2; ++pass) {
        auto & r = wave64::rt();
        r.faults.clear();
        r.reversed = pass == 1;
        for (auto & x : st) {
            memset(x.data, 0x5a, row * KV_SIZE);
        }
        ggml_backend_cuda_context cctx(0);
        ggml_cuda_pyl_set_rows_rot(cctx, st[0].node, st[1].node, rope);  // one launch, as the graph runs them (0041)
        faults.insert(faults.end(), r.faults.begin(), r.faults.end());
        for (auto & x : st) {
            outs[pass].insert(outs[pass].end(), (unsigned char *) x.data, (unsigned char *) x.data + row * KV_SIZE);
        }
    }
    const bool same = outs[0] == outs[1];
    // reference: rotate in double, quantize with ggml's CPU quantizer; the other cells keep their bytes
    double steps = 0;
    long long differ = 0, total = 0;
    bool others_kept = true;
    size_t base = 0;
    for (auto & x : st) {
        const unsigned char * got_cache = outs[0].data() + base;
        base += row * KV_SIZE;
        for (int t = 0; t < n_tokens; ++t) {
            std::vector<double> v(x.src.begin() + (size_t) t * n_embd, x.src.begin() + (size_t) (t + 1) * n_embd);
            if (rc && &x == &st[0]) {
                v = rope_ref(*rc, v, D, ((int32_t *) pos->data)[t], ff ? (const float *) ff->data : nullptr);
            }
            for (int p = 0; p < n_embd; p += x.N) {
                fwht(v, p, x.N);
            }
            std::vector<float> vf(v.begin(), v.end());
            std::vector<unsigned char> want(row);
            ggml_quantize_chunk(type, vf.data(), want.data(), 0, 1, n_embd, nullptr);
            const int64_t cell = ((int64_t *) idx->data)[t];
            const unsigned char * got = got_cache + cell * row;
            const std::vector<float> g = to_float(type, got, n_embd), w = to_float(type, want.data(), n_embd);
            for (int b = 0; b < n_embd / 32; ++b) {
                // the block's step: (max - min) / levels for the types with a minimum; the largest magnitude over
                // half the levels for the symmetric ones (q8_0's d = amax/127, which (max - min)/255 undercounts
                // where the block's values lean to one side: one code moved a step measured 1.1 steps)
                float mn = INFINITY, mx = -INFINITY;
                for (int i = 0; i < 32; ++i) {
                    mn = std::min(mn, w[b * 32 + i]);
                    mx = std::max(mx, w[b * 32 + i]);
                }
                const bool with_min = type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1;
                const double half_levels = type == GGML_TYPE_Q8_0 ? 127 : type == GGML_TYPE_Q5_0 ? 16 : 8;
                const double step = std::max(with_min ? (double) (mx - mn) / (type == GGML_TYPE_Q5_1 ? 31 : 15)
                                                      : std::max(std::fabs(mn), std::fabs(mx)) / half_levels, 1e-30);
                for (int i = 0; i < 32; ++i) {
                    const double dlt = std::fabs((double) g[b * 32 + i] - w[b * 32 + i]);
                    steps = worst(steps, dlt / step);
                    differ += !(dlt == 0);  // NaN counts
                    total++;
                }
            }
        }
        for (int cell = 0; cell < KV_SIZE && others_kept; ++cell) {
            bool stored = false;
            for (int t = 0; t < n_tokens; ++t) {
                stored |= ((int64_t *) idx->data)[t] == cell;
            }
            for (size_t i = 0; !stored && i < row; ++i) {
                if (got_cache[cell * row + i] != 0x5a) {
                    others_kept = false;
                    break;
                }
            }
        }
    }
    const double share = (double) differ / (double) total;
    res.error = steps;
    res.bound = 1.01;  // at most one code step, on a few values
    res.pass = steps <= res.bound && share <= 0.02 && same && others_kept && faults.empty();
    char buf[256];
    snprintf(buf, sizeof(buf), "values off by a step %.2f%%%s%s%s%s", 100.0 * share,
             same ? "" : ", forward and reversed lane orders differ",
             others_kept ? "" : ", other cells written", faults.empty() ? "" : ", fault: ",
             faults.empty() ? "" : faults[0].c_str());
    res.detail = buf;
    return res;
}

// ---- OUT_PROD over a quantized V (patch 0004): the non-flash decode's V^T p -----------------------------------

Result outprod_case(const Shape & s, ggml_type type) {
    Result res;
    std::mt19937_64 rng(555 + s.D * 11 + s.n_head + (int) type);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int D = s.D, n_embd = D * s.n_head_kv;
    Ctx c;
    void * vdata = make_cache(type, n_embd, rng);
    const size_t row = ggml_row_size(type, n_embd), rd = ggml_row_size(type, D);
    ggml_tensor * vc = ggml_new_tensor_2d(c.ctx, type, n_embd, KV_SIZE);
    vc->data = vdata;
    ggml_tensor * v = ggml_view_4d(c.ctx, vc, D, N_KV, s.n_head_kv, 1, row, rd, row * KV_SIZE, 0);
    // p: the softmax output transposed, [1 token, N_KV, n_head, 1]; masked cells 0
    ggml_tensor * p = ggml_new_tensor_4d(c.ctx, GGML_TYPE_F32, 1, N_KV, s.n_head, 1);
    float * pd = dev<float>((size_t) N_KV * s.n_head);
    p->data = pd;
    for (int h = 0; h < s.n_head; ++h) {
        double sum = 0;
        for (int j = 0; j < N_KV; ++j) {
            pd[h * N_KV + j] = j < N_USED ? expf(2.0f * nd(rng)) : 0.0f;
            sum += pd[h * N_KV + j];
        }
        for (int j = 0; j < N_KV; ++j) {
            pd[h * N_KV + j] = (float) (pd[h * N_KV + j] / sum);
        }
    }
    ggml_tensor * dst = ggml_out_prod(c.ctx, v, p);
    dst->data = dev<float>(ggml_nelements(dst));
    if (!ggml_cuda_out_prod_supported(dst)) {
        res.detail = "not supported";
        return res;
    }
    std::vector<float> outs[2];
    std::vector<std::string> faults;
    long long launches = 0;
    for (int pass = 0; pass < 2; ++pass) {
        auto & r = wave64::rt();
        r.faults.clear();
        r.reversed = pass == 1;
        memset(dst->data, 0xff, ggml_nbytes(dst));
        const long long l0 = r.launches;
        ggml_backend_cuda_context cctx(0);
        ggml_cuda_out_prod(cctx, dst);
        launches = r.launches - l0;
        faults.insert(faults.end(), r.faults.begin(), r.faults.end());
        outs[pass].assign((float *) dst->data, (float *) dst->data + ggml_nelements(dst));
    }
    double err = 0, amax = 0;
    const int G = s.n_head / s.n_head_kv;
    for (int h = 0; h < s.n_head; ++h) {
        std::vector<double> o(D, 0.0);
        for (int j = 0; j < N_USED; ++j) {
            const std::vector<float> vr = to_float(type, (const char *) vdata + j * row + (h / G) * rd, D);
            for (int d = 0; d < D; ++d) {
                o[d] += (double) pd[h * N_KV + j] * vr[d];
            }
        }
        for (int d = 0; d < D; ++d) {
            err = worst(err, std::fabs(outs[0][h * D + d] - o[d]));  // dst [D, 1, n_head]
            amax = std::max(amax, std::fabs(o[d]));
        }
    }
    const bool same = outs[0] == outs[1] || !memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float));
    res.error = err / amax;
    res.bound = 1e-4;
    res.pass = std::isfinite(res.error) && res.error <= res.bound && same && faults.empty();
    char buf[256];
    snprintf(buf, sizeof(buf), "%s%s%s%s", launches == 2 ? "KV chunks + reduce" : "one chunk",
             same ? "" : ", forward and reversed lane orders differ", faults.empty() ? "" : ", fault: ",
             faults.empty() ? "" : faults[0].c_str());
    res.detail = buf;
    return res;
}

// ---- self-test kernels: can the harness fail? ---------------------------------------------------------------

// a block of 256 sums its thread ids by groups of 32 lanes (ggml's warp_reduce_sum<32>) and the groups' sums
template <bool assume_32_wide>
__launch_bounds__(256, 1) static __global__ void k_selftest_group_sum(float * out) {
    extern __shared__ float partial[];
    const float x = warp_reduce_sum<32>((float) threadIdx.x);
    // right: a group's lane 0 (threadIdx.x % 32); wrong on wave64 only: a wavefront's lane 0 (threadIdx.x % warpSize)
    const bool leader = assume_32_wide ? threadIdx.x % warpSize == 0 : threadIdx.x % 32 == 0;
    if (leader) {
        partial[threadIdx.x / 32] = x;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0;
        for (int g = 0; g < 8; ++g) {
            s += partial[g];
        }
        out[blockIdx.x] = s;
    }
}

// every group of 32 lanes broadcasts its first lane's value; wrong on wave64 only: the default width (warpSize)
template <bool default_width>
__launch_bounds__(128, 1) static __global__ void k_selftest_broadcast(float * out) {
    const float x = (float) threadIdx.x;
    out[threadIdx.x] = default_width ? __shfl(x, 0) : __shfl_sync(0xFFFFFFFF, x, 0, 32);
}

// the upper half-wave returns; the lower one adds a lane's value 32 lanes away: with 32-wide warps that is the
// next warp's lane (a wrong read there too, but a different one); on wave64 it is an inactive lane, which the
// hardware reads as 0 and the runtime records. The right twin reads 16 lanes away (its own half).
template <bool cross_halves>
__launch_bounds__(64, 1) static __global__ void k_selftest_inactive(float * out) {
    if (threadIdx.x >= 32) {
        return;
    }
    const float x = (float) threadIdx.x;
    out[threadIdx.x] = cross_halves ? __shfl_xor(x, 32, 64) : __shfl_xor(x, 16, 32);
}

// a self-test's result before its launch, with the runtime's fault record cleared for that launch
Result selftest_result(bool expect_fail) {
    Result res;
    res.expect_fail = expect_fail;
    wave64::rt().faults.clear();
    return res;
}

// an exact self-test: it passes with no error and no fault recorded; the detail counts the faults
void finish_exact(Result & res, double err) {
    const size_t faults = wave64::rt().faults.size();
    res.error = err;
    res.bound = 0;
    res.pass = err <= res.bound && faults == 0;
    res.detail = std::to_string(faults) + " faults recorded" + (faults ? ": " + wave64::rt().faults[0] : "");
}

Result selftest_inactive(bool wrong) {
    Result res = selftest_result(wrong);
    float * out = dev<float>(32);
    auto k = wrong ? k_selftest_inactive<true> : k_selftest_inactive<false>;
    k<<<1, 64>>>(out);
    double err = 0;
    for (int t = 0; t < 32; ++t) {
        err = worst(err, std::fabs(out[t] - (float) (wrong ? t ^ 32 : t ^ 16)));
    }
    finish_exact(res, err);
    return res;
}

// a branch with a shuffle on lanes 0-15 of each half-wave, then one shuffle after the branch that reads across
// it: the runtime must let the lanes that skipped the branch wait for the others (reconvergence), without faults
__launch_bounds__(64, 1) static __global__ void k_selftest_reconverge(float * out) {
    const int lane = threadIdx.x;
    float x = (float) lane;
    if (lane % 32 < 16) {
        x = __shfl_xor_sync(0xFFFFFFFF, x, 1, 16);
    } else {
        x += 100.0f;
    }
    out[lane] = __shfl_xor_sync(0xFFFFFFFF, x, 16, 32);
}

Result selftest_reconverge() {
    Result res = selftest_result(false);
    float * out = dev<float>(64);
    k_selftest_reconverge<<<1, 64>>>(out);
    double err = 0;
    for (int t = 0; t < 64; ++t) {
        const int p = t ^ 16;
        err = worst(err, std::fabs(out[t] - (p % 32 < 16 ? (float) (p ^ 1) : (float) p + 100.0f)));
    }
    finish_exact(res, err);
    return res;
}

Result selftest_sum(bool wrong) {
    Result res = selftest_result(wrong);
    float * out = dev<float>(4);
    auto k = wrong ? k_selftest_group_sum<true> : k_selftest_group_sum<false>;
    k<<<4, 256, 8 * sizeof(float)>>>(out);
    double err = 0;
    for (int b = 0; b < 4; ++b) {
        err = worst(err, std::fabs(out[b] - 255.0 * 256.0 / 2.0));
    }
    res.error = std::isfinite(err) ? err / (255.0 * 256.0 / 2.0) : INFINITY;
    res.bound = 1e-6;
    res.pass = res.error <= res.bound && wave64::rt().faults.empty();
    res.detail = wrong ? "partial sums published by threadIdx.x % warpSize == 0" : "by threadIdx.x % 32 == 0";
    return res;
}

Result selftest_broadcast(bool wrong) {
    Result res = selftest_result(wrong);
    float * out = dev<float>(128);
    auto k = wrong ? k_selftest_broadcast<true> : k_selftest_broadcast<false>;
    k<<<1, 128>>>(out);
    double err = 0;
    for (int t = 0; t < 128; ++t) {
        err = worst(err, std::fabs(out[t] - (float) (t / 32 * 32)));
    }
    finish_exact(res, err);
    res.detail = wrong ? "__shfl(x, 0): width warpSize" : "__shfl_sync(mask, x, 0, 32)";
    return res;
}

}  // namespace

int main(int argc, char ** argv) {
    std::string filter, json;
    int shard = 0, shards = 1;  // --shard I/N: every Nth of the matching cases from the Ith, for N processes at once
    const auto usage = [&] {
        fprintf(stderr, "usage: %s [--filter SUBSTRING] [--shard I/N] [--json FILE]\n", argv[0]);
        return 2;
    };
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--filter") && i + 1 < argc) {
            filter = argv[++i];
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json = argv[++i];
        } else if (!strcmp(argv[i], "--shard") && i + 1 < argc) {
            if (sscanf(argv[++i], "%d/%d", &shard, &shards) != 2 || shards < 1 || shard < 0 || shard >= shards) {
                return usage();
            }
        } else {
            return usage();
        }
    }
    std::vector<std::function<Result()>> cases;
    std::vector<std::string> names;  // a case's one name: what --filter matches, what the output says
    int matched = 0;
    auto add = [&](std::string name, std::function<Result()> f) {
        if ((filter.empty() || name.find(filter) != std::string::npos) && matched++ % shards == shard) {
            names.push_back(name);
            cases.push_back(std::move(f));
        }
    };
    add("selftest/group-sum", [] { return selftest_sum(false); });
    add("selftest/group-sum-lane-of-wavefront", [] { return selftest_sum(true); });
    add("selftest/reconverge", [] { return selftest_reconverge(); });
    add("selftest/shuffle", [] { return selftest_inactive(false); });
    add("selftest/shuffle-reads-returned-lanes", [] { return selftest_inactive(true); });
    add("selftest/broadcast", [] { return selftest_broadcast(false); });
    add("selftest/broadcast-default-width", [] { return selftest_broadcast(true); });
    for (const AttnCase & a : ATTN_CASES) {
        for (const Shape & s : SHAPES) {
            for (ggml_type t : TYPES) {
                add(std::string("attn/") + a.name + "/" + s.name + "/" + ggml_type_name(t),
                    [&a, s, t] { return attn_case(a, s, t); });
            }
        }
    }
    for (const Shape & s : SHAPES) {
        for (ggml_type t : {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                            GGML_TYPE_IQ4_NL}) {
            add(std::string("outprod/") + s.name + "/" + ggml_type_name(t), [s, t] { return outprod_case(s, t); });
        }
    }
    for (const Shape & s : SHAPES) {
        for (ggml_type t : TYPES) {
            for (int n : {1, 5}) {
                add(std::string("store/") + s.name + "/" + ggml_type_name(t) + "/" + std::to_string(n),
                    [s, t, n] { return store_case(s, t, n); });
            }
        }
    }
    for (const RopeCase & rc : ROPE_CASES) {
        for (const Shape & s : SHAPES) {
            for (ggml_type t : {GGML_TYPE_Q4_0, GGML_TYPE_Q8_0}) {
                add(std::string("store-rope/") + s.name + "/" + ggml_type_name(t) + "/" + rc.name,
                    [&rc, s, t] { return store_case(s, t, 5, &rc); });
            }
        }
    }
    FILE * jf = json.empty() ? nullptr : fopen(json.c_str(), "w");
    int failed = 0;
    printf("wave64 harness: %zu cases, wavefronts of %d lanes\n", cases.size(), WAVE64_WIDTH);
    for (size_t i = 0; i < cases.size(); ++i) {
        const Result r = cases[i]();
        // a self-test kernel that is wrong must fail: that is the harness passing
        const bool ok = r.expect_fail ? !r.pass : r.pass;
        failed += !ok;
        printf("%-4s %-44s error %.3e (bound %.1e)%s  %s\n", ok ? "ok" : "FAIL", names[i].c_str(), r.error, r.bound,
               r.expect_fail ? (r.pass ? " [wrong kernel NOT detected]" : " [wrong kernel detected]") : "",
               r.detail.c_str());
        fflush(stdout);
        if (jf) {
            fprintf(jf, "{\"case\": \"%s\", \"ok\": %s, \"kernel_pass\": %s, \"expect_fail\": %s, \"error\": %.6e, "
                        "\"bound\": %.3e, \"detail\": \"%s\"}\n", names[i].c_str(), ok ? "true" : "false",
                    r.pass ? "true" : "false", r.expect_fail ? "true" : "false", std::isfinite(r.error) ? r.error : 1e300,
                    r.bound, r.detail.c_str());
        }
    }
    if (jf) {
        fclose(jf);
    }
    printf("wave64 harness: %zu cases, %d failed\n", cases.size(), failed);
    return failed ? 1 : 0;
}
