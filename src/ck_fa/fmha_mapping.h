/* ggml's FLASH_ATTN_EXT node -> CK fmha_fwd arguments and traits (fmha_args.h).
 *
 * Plain C++ without HIP or CK: the HIP glue (patch 0010) calls it per node, and the tests compile it
 * with the system compiler and compare CK's documented semantics of the result with ggml's CPU
 * FLASH_ATTN_EXT. Only declarations cffi can parse below the includes (the tests hand it to cffi). */
#pragma once
#include "fmha_args.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ggml_tensor;

/* Why a node goes (or does not go) to CK; anything but OK keeps ggml's own kernels. */
enum pyllama90a_ck_fa_verdict {
    PYLLAMA90A_CK_FA_OK = 0,
    PYLLAMA90A_CK_FA_DISABLED = 1,      /* the node is not marked GGML_PYL_MARK_CK_FA (the context's paths) */
    PYLLAMA90A_CK_FA_HEAD_DIM = 2,      /* K and V head dims differ or are not a compiled one (64, 128) */
    PYLLAMA90A_CK_FA_TYPE = 3,          /* Q, K, V, mask or output of a type the path does not take */
    PYLLAMA90A_CK_FA_SINKS = 4,         /* attention sinks: CK's forward has none */
    PYLLAMA90A_CK_FA_ALIBI = 5,         /* max_bias > 0: the compiled instances have no ALiBi */
    PYLLAMA90A_CK_FA_SOFTCAP = 6,       /* logit softcap: CK allows it only without a bias (our mask) */
    PYLLAMA90A_CK_FA_DECODE_BATCH = 7,  /* too few queries: decode stays on the quantized ggml path */
    PYLLAMA90A_CK_FA_BROADCAST = 8,     /* a broadcast CK's strides cannot express (GQA ratio, mask) */
    PYLLAMA90A_CK_FA_STRIDES = 9,       /* an extent or stride does not fit CK's int32 element offsets */
    PYLLAMA90A_CK_FA_STAGING = 10       /* the F16 copies and output staging would exceed max_staging_bytes */
};

struct pyllama90a_ck_fa_options {
    int32_t min_queries;    /* fewest queries per sequence sent to CK; below, the verdict is DECODE_BATCH */
    bool    causal;         /* also apply CK's own causal mask (key j visible to query i iff
                               j <= i + causal_offset, causal_offset >= 0), which skips masked tiles;
                               the KQ mask still applies */
    int32_t causal_offset;
    int64_t max_staging_bytes;  /* bound on the pool memory of the F16 copies and the output staging */
};

/* Where the F16 operands live. A Q, K or V that is already F16 is read in place (these are its data);
 * otherwise (F32 Q, quantized K/V) the caller converts it to a contiguous F16 tensor of the same ne
 * here first. O is always a contiguous F16 staging tensor shaped like the node's F32 output. */
struct pyllama90a_ck_fa_buffers {
    const void * q;
    const void * k;
    const void * v;
    void * o;
};

int32_t pyllama90a_ck_fa_default_min_queries(void);
int64_t pyllama90a_ck_fa_default_max_staging_bytes(void);
const char * pyllama90a_ck_fa_verdict_name(int verdict);

/* Does this operand (src 0..2 of the node) need the contiguous F16 copy described above? */
bool pyllama90a_ck_fa_needs_f16_copy(const struct ggml_tensor * operand);

/* Bytes of pool memory the caller needs for the node: the F16 copies plus the F16 output staging. */
int64_t pyllama90a_ck_fa_staging_bytes(const struct ggml_tensor * node);

/* The verdict for a FLASH_ATTN_EXT node, without touching any data. */
int pyllama90a_ck_fa_check(const struct ggml_tensor * node, const struct pyllama90a_ck_fa_options * options);

/* The verdict, and on OK the filled arguments and traits for fmha_fwd. */
int pyllama90a_ck_fa_map(const struct ggml_tensor * node, const struct pyllama90a_ck_fa_options * options,
                         const struct pyllama90a_ck_fa_buffers * buffers,
                         struct pyllama90a_fmha_fwd_args * args, struct pyllama90a_fmha_fwd_traits * traits);

#ifdef __cplusplus
}
#endif
