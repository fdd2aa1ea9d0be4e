// HIP glue of the CK FlashAttention dispatch (-DPYLLAMA90A_CK_FA=ON, compiled into ggml-hip by
// cmake/ck_fa.cmake). Patch 0010 makes ggml-cuda's FLASH_ATTN_EXT ask pyllama90a_ck_fa_try first.
//
// Every decision lives in fmha_mapping.cpp, which the CPU tests prove; this file only stages F16
// operands in ggml's memory pool, copies the C mirror into CK's own structs and converts the F16
// output to dst's F32. It needs ROCm >= 6.1 (as ggml-hip does) and cannot be compiled without it.
#include "common.cuh"
#include "convert.cuh"

#include "fmha_fwd.hpp"
#include "fmha_mapping.h"

#include <utility>

bool pyllama90a_ck_fa_try(ggml_backend_cuda_context & ctx, ggml_tensor * dst);

namespace {

// Field by field, in CK's order (tests/test_ck_fmha_mapping.py checks this list against the mirror).
fmha_fwd_args ck_args(const pyllama90a_fmha_fwd_args & m) {
    fmha_fwd_args a{};
    a.q_ptr = m.q_ptr;
    a.k_ptr = m.k_ptr;
    a.v_ptr = m.v_ptr;
    a.bias_ptr = m.bias_ptr;
    a.rand_val_ptr = m.rand_val_ptr;
    a.lse_ptr = m.lse_ptr;
    a.o_ptr = m.o_ptr;
    a.seqstart_q_ptr = m.seqstart_q_ptr;
    a.seqstart_k_ptr = m.seqstart_k_ptr;
    a.seqlen_k_ptr = m.seqlen_k_ptr;
    a.seqlen_q = m.seqlen_q;
    a.seqlen_k = m.seqlen_k;
    a.batch = m.batch;
    a.max_seqlen_q = m.max_seqlen_q;
    a.hdim_q = m.hdim_q;
    a.hdim_v = m.hdim_v;
    a.nhead_q = m.nhead_q;
    a.nhead_k = m.nhead_k;
    a.scale_s = m.scale_s;
    a.scale_p = m.scale_p;
    a.scale_o = m.scale_o;
    a.logits_soft_cap = m.logits_soft_cap;
    a.stride_q = m.stride_q;
    a.stride_k = m.stride_k;
    a.stride_v = m.stride_v;
    a.stride_bias = m.stride_bias;
    a.stride_randval = m.stride_randval;
    a.stride_o = m.stride_o;
    a.nhead_stride_q = m.nhead_stride_q;
    a.nhead_stride_k = m.nhead_stride_k;
    a.nhead_stride_v = m.nhead_stride_v;
    a.nhead_stride_bias = m.nhead_stride_bias;
    a.nhead_stride_randval = m.nhead_stride_randval;
    a.nhead_stride_lse = m.nhead_stride_lse;
    a.nhead_stride_o = m.nhead_stride_o;
    a.batch_stride_q = m.batch_stride_q;
    a.batch_stride_k = m.batch_stride_k;
    a.batch_stride_v = m.batch_stride_v;
    a.batch_stride_bias = m.batch_stride_bias;
    a.batch_stride_randval = m.batch_stride_randval;
    a.batch_stride_lse = m.batch_stride_lse;
    a.batch_stride_o = m.batch_stride_o;
    a.window_size_left = m.window_size_left;
    a.window_size_right = m.window_size_right;
    a.mask_type = m.mask_type;
    a.min_seqlen_q = m.min_seqlen_q;
    a.p_drop = m.p_drop;
    a.s_randval = m.s_randval;
    a.drop_seed_offset = std::make_pair(m.drop_seed_offset.seed, m.drop_seed_offset.offset);
    return a;
}

fmha_fwd_traits ck_traits(const pyllama90a_fmha_fwd_traits & m) {
    fmha_fwd_traits t{};
    t.hdim_q = m.hdim_q;
    t.hdim_v = m.hdim_v;
    t.data_type = m.data_type;
    t.is_group_mode = m.is_group_mode;
    t.is_v_rowmajor = m.is_v_rowmajor;
    t.has_logits_soft_cap = m.has_logits_soft_cap;
    t.mask_type = static_cast<mask_enum>(m.mask_type);
    t.bias_type = static_cast<bias_enum>(m.bias_type);
    t.has_lse = m.has_lse;
    t.has_dropout = m.has_dropout;
    t.do_fp8_static_quant = m.do_fp8_static_quant;
    t.skip_min_seqlen_q = m.skip_min_seqlen_q;
    return t;
}

// The operand as F16: in place, or converted (F32 Q, quantized K/V) into a contiguous pool buffer,
// the layout fmha_mapping.cpp assumes for copies. Strides are in the source's blocks, as ggml's own
// FA staging passes them (fattn-common.cuh).
const void * as_f16(const ggml_tensor * t, ggml_cuda_pool_alloc<half> & copy, cudaStream_t stream) {
    if (!pyllama90a_ck_fa_needs_f16_copy(t)) {
        return t->data;
    }
    const size_t ts = ggml_type_size(t->type);
    copy.alloc(ggml_nelements(t));
    ggml_get_to_fp16_nc_cuda(t->type)(t->data, copy.ptr, t->ne[0], t->ne[1], t->ne[2], t->ne[3],
                                      t->nb[1] / ts, t->nb[2] / ts, t->nb[3] / ts, stream);
    return copy.ptr;
}

bool converters_exist(const ggml_tensor * node) {
    for (int i = 0; i < 3; ++i) {
        const ggml_tensor * t = node->src[i];
        if (pyllama90a_ck_fa_needs_f16_copy(t) && ggml_get_to_fp16_nc_cuda(t->type) == nullptr) {
            return false;
        }
    }
    return true;
}

}  // namespace

bool pyllama90a_ck_fa_try(ggml_backend_cuda_context & ctx, ggml_tensor * dst) {
    // the instances are compiled for gfx90a only (CDNA2: MI210/MI250)
    if (!GGML_CUDA_CC_IS_CDNA2(ggml_cuda_info().devices[ctx.device].cc)) {
        return false;
    }
    const pyllama90a_ck_fa_options options = {
        pyllama90a_ck_fa_default_min_queries(), false, 0, pyllama90a_ck_fa_default_max_staging_bytes()};
    if (pyllama90a_ck_fa_check(dst, &options) != PYLLAMA90A_CK_FA_OK || !converters_exist(dst)) {
        return false;
    }
    cudaStream_t stream = ctx.stream();
    ggml_cuda_pool_alloc<half> q_copy(ctx.pool()), k_copy(ctx.pool()), v_copy(ctx.pool());
    ggml_cuda_pool_alloc<half> o_f16(ctx.pool(), ggml_nelements(dst));
    const pyllama90a_ck_fa_buffers buffers = {
        as_f16(dst->src[0], q_copy, stream), as_f16(dst->src[1], k_copy, stream),
        as_f16(dst->src[2], v_copy, stream), o_f16.ptr};
    pyllama90a_fmha_fwd_args args;
    pyllama90a_fmha_fwd_traits traits;
    if (pyllama90a_ck_fa_map(dst, &options, &buffers, &args, &traits) != PYLLAMA90A_CK_FA_OK) {
        return false;
    }
    ck_tile::stream_config config{};
    config.stream_id_ = stream;
    // < 0: no compiled instance takes these arguments; ggml's kernels run instead (the staging was only wasted)
    if (fmha_fwd(ck_traits(traits), ck_args(args), config) < 0.0f) {
        return false;
    }
    ggml_get_to_fp32_cuda(GGML_TYPE_F16)(o_f16.ptr, static_cast<float *>(dst->data), ggml_nelements(dst), stream);
    CUDA_CHECK(cudaGetLastError());
    return true;
}
