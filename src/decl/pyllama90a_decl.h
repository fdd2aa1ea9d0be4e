/* pyllama90a's additions to llama.cpp's C API (the patched tree's include/llama-pyllama90a.h) and to ggml's
   (ggml/include/ggml-pyllama90a.h): attention paths, exact KV and compute buffer sizes, the KV type list. */
enum llama_pyl_attn_path {
    LLAMA_PYL_ATTN_VQUANT_DIRECT = 1,
    LLAMA_PYL_ATTN_KQ_GROUPED = 2,
    LLAMA_PYL_ATTN_KV_CUBLAS = 4,
    LLAMA_PYL_ATTN_CK_FA = 8,
    LLAMA_PYL_ATTN_HYBRID = 16,
    LLAMA_PYL_ATTN_FUSED_DECODE = 32,
    LLAMA_PYL_ATTN_FOLD_ROTATIONS = 64,
};
#define LLAMA_PYL_HYBRID_MAX_DECODE_TOKENS 8
struct llama_pyl_attn_params { uint32_t paths; };
struct llama_pyl_attn_params llama_pyl_attn_default_params(void);
bool llama_pyl_set_attn_params(struct llama_context * ctx, struct llama_pyl_attn_params params);
struct llama_pyl_attn_params llama_pyl_get_attn_params(const struct llama_context * ctx);
void llama_kv_cache_bytes(const struct llama_context * ctx, size_t * k_bytes, size_t * v_bytes);
size_t llama_compute_buffer_bytes(const struct llama_context * ctx);

#define GGML_PYL_MARK_SLOT ...
enum ggml_pyl_mark { GGML_PYL_MARK_K_CACHE = 1, GGML_PYL_MARK_KV_CUBLAS = 2, GGML_PYL_MARK_CK_FA = 4,
                     GGML_PYL_MARK_FUSED_DECODE = 8, GGML_PYL_MARK_ROTATED = 16, GGML_PYL_MARK_ROTATE_ROWS = 32 };
bool ggml_pyl_kv_quant_type(enum ggml_type type);
int32_t ggml_pyl_get_mark(const struct ggml_tensor * t);
void ggml_pyl_set_mark(struct ggml_tensor * t, int32_t mark);
