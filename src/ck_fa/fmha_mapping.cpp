// ggml FLASH_ATTN_EXT node -> CK fmha_fwd arguments (fmha_mapping.h says what and why).
//
// ggml's layout (ne[0] innermost):  q [D, n_q, n_head, n_seq]      k [D, n_kv, n_head_kv, n_seq]
//                                   v [Dv, n_kv, n_head_kv, n_seq]  mask [n_kv, >= n_q, 1|n_head, 1|n_seq]
//                                   dst (F32) [Dv, n_head, n_q, n_seq], contiguous
// CK's batch mode reads element (b, h, i, d) of q at b*batch_stride_q + h*nhead_stride_q + i*stride_q + d,
// the same for k/v with the KV head h / (nhead_q / nhead_k), bias at (b, h, i, j), o at (b, h, i, d):
// every ggml view whose innermost dimension is contiguous maps onto this without a copy.
#include "fmha_mapping.h"

#include "ggml.h"
#include "ggml-pyllama90a.h"

#include <cstdint>
#include <cstring>

namespace {

constexpr int64_t kHeadDims[] = {64, 128};  // the head dims vendor/ck_fmha_codegen.py generates
// below this many queries per sequence the node is a decode step: ggml's (quantized) kernels keep it
constexpr int32_t kDefaultMinQueries = 16;
// a quantized cache is dequantized whole: beyond this the copies are not worth their memory, ggml keeps the node
constexpr int64_t kDefaultMaxStagingBytes = int64_t(1) << 30;
constexpr size_t kF16 = 2;

struct Strides {  // in elements, as CK's index_t wants them
    int64_t row, head, batch;
};

float op_param_f32(const ggml_tensor * node, int i) {
    float value;
    std::memcpy(&value, reinterpret_cast<const char *>(node->op_params) + i * sizeof(float), sizeof(value));
    return value;
}

bool kv_type_supported(ggml_type type) {
    switch (type) {
        case GGML_TYPE_F16:  // read in place
        // the cache types the project supports: the caller dequantizes them into an F16 copy
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
        case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL:
            return true;
        default:
            return false;
    }
}

bool head_dim_compiled(int64_t d) {
    for (int64_t compiled : kHeadDims) {
        if (d == compiled) return true;
    }
    return false;
}

bool fits_index(int64_t v) { return v >= 0 && v <= INT32_MAX; }

// Element strides of an F16 operand as CK reads it: its own when read in place, a contiguous copy's otherwise.
// False when a byte stride is no whole number of F16 elements.
bool f16_strides(const ggml_tensor * t, Strides * s) {
    if (pyllama90a_ck_fa_needs_f16_copy(t)) {
        *s = {t->ne[0], t->ne[0] * t->ne[1], t->ne[0] * t->ne[1] * t->ne[2]};
        return true;
    }
    if (t->nb[0] != kF16 || t->nb[1] % kF16 || t->nb[2] % kF16 || t->nb[3] % kF16) return false;
    *s = {int64_t(t->nb[1] / kF16), int64_t(t->nb[2] / kF16), int64_t(t->nb[3] / kF16)};
    return true;
}

// The F16 O staging tensor has dst's layout [Dv, n_head, n_q, n_seq], seen by CK as (batch, head, query):
// consecutive queries are n_head rows apart.
Strides output_strides(const ggml_tensor * dst) {
    return {dst->ne[0] * dst->ne[1], dst->ne[0], dst->ne[0] * dst->ne[1] * dst->ne[2]};
}

// CK adds i*stride in int32: the farthest element and every stride must fit.
bool addressable(const ggml_tensor * t, const Strides & s, int64_t heads_stride_used, int64_t batch_stride_used) {
    const int64_t last = (t->ne[0] - 1) + (t->ne[1] - 1) * s.row + (t->ne[2] - 1) * heads_stride_used +
                         (t->ne[3] - 1) * batch_stride_used;
    return fits_index(last) && fits_index(s.row) && fits_index(heads_stride_used) && fits_index(batch_stride_used);
}

int32_t min_queries(const pyllama90a_ck_fa_options * options) {
    return options ? options->min_queries : kDefaultMinQueries;
}

int64_t max_staging_bytes(const pyllama90a_ck_fa_options * options) {
    return options ? options->max_staging_bytes : kDefaultMaxStagingBytes;
}

}  // namespace

extern "C" {

int32_t pyllama90a_ck_fa_default_min_queries(void) { return kDefaultMinQueries; }

int64_t pyllama90a_ck_fa_default_max_staging_bytes(void) { return kDefaultMaxStagingBytes; }

const char * pyllama90a_ck_fa_verdict_name(int verdict) {
    switch (verdict) {
        case PYLLAMA90A_CK_FA_OK: return "ok";
        case PYLLAMA90A_CK_FA_DISABLED: return "disabled";
        case PYLLAMA90A_CK_FA_HEAD_DIM: return "head_dim";
        case PYLLAMA90A_CK_FA_TYPE: return "type";
        case PYLLAMA90A_CK_FA_SINKS: return "sinks";
        case PYLLAMA90A_CK_FA_ALIBI: return "alibi";
        case PYLLAMA90A_CK_FA_SOFTCAP: return "softcap";
        case PYLLAMA90A_CK_FA_DECODE_BATCH: return "decode_batch";
        case PYLLAMA90A_CK_FA_BROADCAST: return "broadcast";
        case PYLLAMA90A_CK_FA_STRIDES: return "strides";
        case PYLLAMA90A_CK_FA_STAGING: return "staging";
        default: return "unknown";
    }
}

bool pyllama90a_ck_fa_needs_f16_copy(const ggml_tensor * operand) { return operand->type != GGML_TYPE_F16; }

int64_t pyllama90a_ck_fa_staging_bytes(const ggml_tensor * node) {
    int64_t elements = node->ne[0] * node->ne[1] * node->ne[2] * node->ne[3];  // the output staging
    for (int i = 0; i < 3; ++i) {
        const ggml_tensor * t = node->src[i];
        if (pyllama90a_ck_fa_needs_f16_copy(t)) elements += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    }
    return elements * int64_t(kF16);
}

int pyllama90a_ck_fa_check(const ggml_tensor * node, const pyllama90a_ck_fa_options * options) {
    // only nodes the graph marked for CK (the context's attention paths allow it: llama-pyllama90a.h)
    if (!(ggml_pyl_get_mark(node) & GGML_PYL_MARK_CK_FA)) return PYLLAMA90A_CK_FA_DISABLED;

    const ggml_tensor * q = node->src[0];
    const ggml_tensor * k = node->src[1];
    const ggml_tensor * v = node->src[2];
    const ggml_tensor * mask = node->src[3];
    const ggml_tensor * sinks = node->src[4];

    if (k->ne[0] != q->ne[0] || v->ne[0] != k->ne[0] || !head_dim_compiled(k->ne[0])) return PYLLAMA90A_CK_FA_HEAD_DIM;
    if ((q->type != GGML_TYPE_F32 && q->type != GGML_TYPE_F16) || !kv_type_supported(k->type) ||
        !kv_type_supported(v->type) || (mask && mask->type != GGML_TYPE_F16) || node->type != GGML_TYPE_F32) {
        return PYLLAMA90A_CK_FA_TYPE;
    }
    if (sinks) return PYLLAMA90A_CK_FA_SINKS;
    if (op_param_f32(node, 1) != 0.0f) return PYLLAMA90A_CK_FA_ALIBI;
    if (op_param_f32(node, 2) != 0.0f) return PYLLAMA90A_CK_FA_SOFTCAP;
    if (q->ne[1] < min_queries(options)) return PYLLAMA90A_CK_FA_DECODE_BATCH;

    // CK maps query head h to KV head h / (nhead_q / nhead_k) like ggml; sequences are never broadcast
    // (ggml asserts equal ne[3]); a mask broadcasts over all heads/sequences or none (CK: stride 0 or full)
    if (q->ne[2] % k->ne[2] || k->ne[2] != v->ne[2] || k->ne[1] != v->ne[1] || k->ne[3] != q->ne[3] ||
        v->ne[3] != q->ne[3]) {
        return PYLLAMA90A_CK_FA_BROADCAST;
    }
    if (mask && ((mask->ne[2] != 1 && mask->ne[2] != q->ne[2]) || (mask->ne[3] != 1 && mask->ne[3] != q->ne[3]) ||
                 mask->ne[0] < k->ne[1] || mask->ne[1] < q->ne[1])) {
        return PYLLAMA90A_CK_FA_BROADCAST;
    }

    Strides sq, sk, sv;
    if (!f16_strides(q, &sq) || !f16_strides(k, &sk) || !f16_strides(v, &sv)) return PYLLAMA90A_CK_FA_STRIDES;
    const Strides so = output_strides(node);
    if (!addressable(q, sq, sq.head, sq.batch) || !addressable(k, sk, sk.head, sk.batch) ||
        !addressable(v, sv, sv.head, sv.batch) || !addressable(node, so, so.head, so.batch)) {
        return PYLLAMA90A_CK_FA_STRIDES;
    }
    if (mask) {
        Strides sm;
        if (!f16_strides(mask, &sm)) return PYLLAMA90A_CK_FA_STRIDES;
        if (!addressable(mask, sm, mask->ne[2] == 1 ? 0 : sm.head, mask->ne[3] == 1 ? 0 : sm.batch)) {
            return PYLLAMA90A_CK_FA_STRIDES;
        }
    }
    if (pyllama90a_ck_fa_staging_bytes(node) > max_staging_bytes(options)) return PYLLAMA90A_CK_FA_STAGING;
    return PYLLAMA90A_CK_FA_OK;
}

int pyllama90a_ck_fa_map(const ggml_tensor * node, const pyllama90a_ck_fa_options * options,
                         const pyllama90a_ck_fa_buffers * buffers, pyllama90a_fmha_fwd_args * args,
                         pyllama90a_fmha_fwd_traits * traits) {
    const int verdict = pyllama90a_ck_fa_check(node, options);
    if (verdict != PYLLAMA90A_CK_FA_OK) return verdict;

    const ggml_tensor * q = node->src[0];
    const ggml_tensor * k = node->src[1];
    const ggml_tensor * v = node->src[2];
    const ggml_tensor * mask = node->src[3];
    Strides sq, sk, sv;
    f16_strides(q, &sq);
    f16_strides(k, &sk);
    f16_strides(v, &sv);

    std::memset(args, 0, sizeof(*args));
    args->q_ptr = buffers->q;
    args->k_ptr = buffers->k;
    args->v_ptr = buffers->v;
    args->o_ptr = buffers->o;
    // batch mode: every sequence (ggml's ne[3], one per KV stream) has the same n_q and n_kv
    args->seqlen_q = int32_t(q->ne[1]);
    args->seqlen_k = int32_t(k->ne[1]);
    args->batch = int32_t(q->ne[3]);
    args->max_seqlen_q = int32_t(q->ne[1]);
    args->hdim_q = int32_t(q->ne[0]);
    args->hdim_v = int32_t(v->ne[0]);
    args->nhead_q = int32_t(q->ne[2]);
    args->nhead_k = int32_t(k->ne[2]);
    args->scale_s = op_param_f32(node, 0);
    args->scale_p = 1.0f;  // scale_p and scale_o serve fp8 static quantization only
    args->scale_o = 1.0f;
    args->logits_soft_cap = 0.0f;

    args->stride_q = int32_t(sq.row);
    args->nhead_stride_q = int32_t(sq.head);
    args->batch_stride_q = int32_t(sq.batch);
    args->stride_k = int32_t(sk.row);
    args->nhead_stride_k = int32_t(sk.head);
    args->batch_stride_k = int32_t(sk.batch);
    // V is row-major ([n_kv][Dv] per head: is_v_rowmajor), the layout ggml's FA path keeps it in
    args->stride_v = int32_t(sv.row);
    args->nhead_stride_v = int32_t(sv.head);
    args->batch_stride_v = int32_t(sv.batch);
    const Strides so = output_strides(node);
    args->stride_o = int32_t(so.row);
    args->nhead_stride_o = int32_t(so.head);
    args->batch_stride_o = int32_t(so.batch);

    // ggml's KQ mask (0 or -inf, padding and sequence separation included) is added to scale*QK^T,
    // which is exactly CK's elementwise bias; broadcast dimensions get stride 0
    if (mask) {
        Strides sm;
        f16_strides(mask, &sm);
        args->bias_ptr = mask->data;
        args->stride_bias = int32_t(sm.row);
        args->nhead_stride_bias = mask->ne[2] == 1 ? 0 : int32_t(sm.head);
        args->batch_stride_bias = mask->ne[3] == 1 ? 0 : int32_t(sm.batch);
    }

    // CK's mask from a top-left (left, right) window: left -1 is unbounded, right is the diagonal offset
    const bool causal = options && options->causal;
    args->mask_type = causal ? PYLLAMA90A_CK_MASK_TOP_LEFT : PYLLAMA90A_CK_MASK_NO_MASK;
    args->window_size_left = -1;
    args->window_size_right = causal ? options->causal_offset : -1;
    args->min_seqlen_q = 0;
    args->p_drop = 0.0f;
    args->s_randval = false;

    traits->hdim_q = args->hdim_q;
    traits->hdim_v = args->hdim_v;
    traits->data_type = "fp16";
    traits->is_group_mode = false;
    traits->is_v_rowmajor = true;
    traits->has_logits_soft_cap = false;
    traits->mask_type = args->mask_type;
    traits->bias_type = mask ? PYLLAMA90A_CK_BIAS_ELEMENTWISE : PYLLAMA90A_CK_BIAS_NO_BIAS;
    traits->has_lse = false;
    traits->has_dropout = false;
    traits->do_fp8_static_quant = false;
    traits->skip_min_seqlen_q = false;
    return PYLLAMA90A_CK_FA_OK;
}

}  // extern "C"
