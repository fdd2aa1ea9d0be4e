/* A C mirror of CK's fmha forward API (example/ck_tile/01_fmha/fmha_fwd.hpp, mask.hpp, bias.hpp of the
 * CK in vendor/ck.toml): fmha_fwd_args and fmha_fwd_traits with the same field names in the same order.
 * The mapping (fmha_mapping.cpp) fills these without HIP or CK headers; the HIP glue copies them field
 * by field into CK's own structs. tests/test_ck_fmha_mapping.py checks names and order against the
 * fetched header, so a CK update that moves a field fails there, not on an MI210.
 * Plain C declarations only: the tests hand this file to cffi's parser. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

/* mask_enum (mask.hpp), kept in sync with ck_tile::GenericAttentionMaskEnum */
enum pyllama90a_ck_mask_enum {
    PYLLAMA90A_CK_MASK_NO_MASK = 0,
    PYLLAMA90A_CK_MASK_TOP_LEFT = 1,
    PYLLAMA90A_CK_MASK_BOTTOM_RIGHT = 2,
    PYLLAMA90A_CK_MASK_WINDOW_GENERIC = 3
};

/* bias_enum (bias.hpp), kept in sync with ck_tile::BlockAttentionBiasEnum */
enum pyllama90a_ck_bias_enum {
    PYLLAMA90A_CK_BIAS_NO_BIAS = 0,
    PYLLAMA90A_CK_BIAS_ELEMENTWISE = 1,
    PYLLAMA90A_CK_BIAS_ALIBI = 2
};

/* fmha_fwd_args; ck_tile::index_t is int32_t. CK's drop_seed_offset is a std::variant of two
 * (seed, offset) pairs: here the by-value alternative, which the glue wraps in std::pair. */
struct pyllama90a_fmha_drop_seed_offset {
    uint64_t seed;
    uint64_t offset;
};

struct pyllama90a_fmha_fwd_args {
    const void * q_ptr;
    const void * k_ptr;
    const void * v_ptr;
    const void * bias_ptr;
    void * rand_val_ptr;
    void * lse_ptr;
    void * o_ptr;

    const void * seqstart_q_ptr;
    const void * seqstart_k_ptr;
    const void * seqlen_k_ptr;

    int32_t seqlen_q;
    int32_t seqlen_k;
    int32_t batch;
    int32_t max_seqlen_q;
    int32_t hdim_q;
    int32_t hdim_v;
    int32_t nhead_q;
    int32_t nhead_k;

    float scale_s;
    float scale_p;
    float scale_o;

    float logits_soft_cap;

    int32_t stride_q;
    int32_t stride_k;
    int32_t stride_v;
    int32_t stride_bias;
    int32_t stride_randval;
    int32_t stride_o;
    int32_t nhead_stride_q;
    int32_t nhead_stride_k;
    int32_t nhead_stride_v;
    int32_t nhead_stride_bias;
    int32_t nhead_stride_randval;
    int32_t nhead_stride_lse;
    int32_t nhead_stride_o;
    int32_t batch_stride_q;
    int32_t batch_stride_k;
    int32_t batch_stride_v;
    int32_t batch_stride_bias;
    int32_t batch_stride_randval;
    int32_t batch_stride_lse;
    int32_t batch_stride_o;

    int32_t window_size_left;
    int32_t window_size_right;
    int32_t mask_type;
    int32_t min_seqlen_q;

    float p_drop;
    bool s_randval;

    struct pyllama90a_fmha_drop_seed_offset drop_seed_offset;
};

/* fmha_fwd_traits; data_type is a std::string in CK */
struct pyllama90a_fmha_fwd_traits {
    int hdim_q;
    int hdim_v;
    const char * data_type;
    bool is_group_mode;
    bool is_v_rowmajor;
    bool has_logits_soft_cap;
    int mask_type;
    int bias_type;
    bool has_lse;
    bool has_dropout;
    bool do_fp8_static_quant;
    bool skip_min_seqlen_q;
};
