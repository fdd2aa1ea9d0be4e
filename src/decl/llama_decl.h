/* llama.h declarations used by pyllama90a (cffi cdef; API mode checks them against llama.h).
   Structs are partial ("...;"): the C compiler fills in layout and the fields we do not use. */

typedef int32_t llama_pos;
typedef int32_t llama_token;
typedef int32_t llama_seq_id;

struct llama_model;
struct llama_context;
struct llama_vocab;
struct llama_sampler;
struct llama_memory_i;
struct llama_adapter_lora;
typedef struct llama_memory_i * llama_memory_t;

enum llama_flash_attn_type {
    LLAMA_FLASH_ATTN_TYPE_AUTO, LLAMA_FLASH_ATTN_TYPE_DISABLED, LLAMA_FLASH_ATTN_TYPE_ENABLED, ...
};
enum llama_pooling_type {
    LLAMA_POOLING_TYPE_UNSPECIFIED, LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_MEAN,
    LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_RANK, ...
};

typedef bool (*llama_progress_callback)(float progress, void * user_data);

enum llama_split_mode { LLAMA_SPLIT_MODE_NONE, LLAMA_SPLIT_MODE_LAYER, LLAMA_SPLIT_MODE_ROW, ... };

enum llama_load_mode { LLAMA_LOAD_MODE_AUTO = -1, LLAMA_LOAD_MODE_NONE = 0, ... };

struct llama_model_params {
    ggml_backend_dev_t * devices;  /* NULL-terminated; NULL: llama.cpp picks the local GPUs */
    int32_t n_gpu_layers;
    enum llama_split_mode split_mode;
    int32_t main_gpu;
    const float * tensor_split;    /* llama_max_devices() shares, one per device of `devices` first */
    llama_progress_callback progress_callback;
    void * progress_callback_user_data;
    bool vocab_only;
    bool use_extra_bufts;  /* the CPU's extra buffer types for weights: AMX, repacked layouts */
    bool no_alloc;         /* metadata only: every allocation (weights, KV, compute buffers) is simulated */
    enum llama_load_mode load_mode;  /* NONE with no_alloc: a mapped file would give host buffers, which it asserts on */
    ...;
};

struct llama_context_params {
    uint32_t n_ctx;
    uint32_t n_batch;
    uint32_t n_ubatch;
    uint32_t n_seq_max;
    int32_t  n_threads;
    int32_t  n_threads_batch;
    enum llama_pooling_type    pooling_type;
    enum llama_flash_attn_type flash_attn_type;
    enum ggml_type type_k;
    enum ggml_type type_v;
    bool embeddings;
    bool offload_kqv;
    bool no_perf;
    bool kv_unified;
    ggml_backend_sched_eval_callback cb_eval;
    void * cb_eval_user_data;
    ...;
};

typedef struct llama_batch {
    int32_t n_tokens;
    llama_token  *  token;
    float        *  embd;
    llama_pos    *  pos;
    int32_t      *  n_seq_id;
    llama_seq_id ** seq_id;
    int8_t       *  logits;
} llama_batch;

typedef struct llama_chat_message {
    const char * role;
    const char * content;
} llama_chat_message;

typedef struct llama_sampler_chain_params {
    bool no_perf;
} llama_sampler_chain_params;

struct llama_model_params   llama_model_default_params(void);
struct llama_context_params llama_context_default_params(void);
struct llama_sampler_chain_params llama_sampler_chain_default_params(void);

void llama_backend_init(void);
size_t llama_max_devices(void);
void llama_log_set(ggml_log_callback log_callback, void * user_data);
const char * llama_print_system_info(void);
bool llama_supports_gpu_offload(void);
const char * llama_flash_attn_type_name(enum llama_flash_attn_type flash_attn_type);

/* model */
struct llama_model * llama_model_load_from_file(const char * path_model, struct llama_model_params params);
void llama_model_free(struct llama_model * model);
const struct llama_vocab * llama_model_get_vocab(const struct llama_model * model);
int32_t  llama_model_n_ctx_train(const struct llama_model * model);
int32_t  llama_model_n_embd(const struct llama_model * model);
int32_t  llama_model_n_layer(const struct llama_model * model);
int32_t  llama_model_n_head(const struct llama_model * model);
int32_t  llama_model_n_head_kv(const struct llama_model * model);
uint64_t llama_model_size(const struct llama_model * model);
int32_t  llama_model_desc(const struct llama_model * model, char * buf, size_t buf_size);
int32_t  llama_model_meta_val_str(const struct llama_model * model, const char * key, char * buf, size_t buf_size);
const char * llama_model_chat_template(const struct llama_model * model, const char * name);
bool llama_model_has_encoder(const struct llama_model * model);
uint32_t llama_model_n_cls_out(const struct llama_model * model);  /* a classifier's (reranker's) outputs */

/* context */
struct llama_context * llama_init_from_model(struct llama_model * model, struct llama_context_params params);
void     llama_free(struct llama_context * ctx);
uint32_t llama_n_ctx(const struct llama_context * ctx);
uint32_t llama_n_batch(const struct llama_context * ctx);
uint32_t llama_n_ubatch(const struct llama_context * ctx);
uint32_t llama_n_seq_max(const struct llama_context * ctx);
enum llama_pooling_type llama_pooling_type(const struct llama_context * ctx);
llama_memory_t llama_get_memory(const struct llama_context * ctx);
void llama_set_n_threads(struct llama_context * ctx, int32_t n_threads, int32_t n_threads_batch);
void llama_set_embeddings(struct llama_context * ctx, bool embeddings);
void llama_set_causal_attn(struct llama_context * ctx, bool causal_attn);
bool llama_get_causal_attn(const struct llama_context * ctx);
void llama_synchronize(struct llama_context * ctx);

void llama_memory_clear(llama_memory_t mem, bool data);
bool llama_memory_seq_rm(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1);
llama_pos llama_memory_seq_pos_max(llama_memory_t mem, llama_seq_id seq_id);
void llama_memory_seq_add(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1, llama_pos delta);
bool llama_memory_can_shift(llama_memory_t mem);

/* state: the in-memory API, so pyllama90a writes and verifies state files itself (state_file.py) */
size_t llama_state_get_size(struct llama_context * ctx);
size_t llama_state_get_data(struct llama_context * ctx, uint8_t * dst, size_t size);
size_t llama_state_set_data(struct llama_context * ctx, const uint8_t * src, size_t size);
size_t llama_state_seq_get_size(struct llama_context * ctx, llama_seq_id seq_id);
size_t llama_state_seq_get_data(struct llama_context * ctx, uint8_t * dst, size_t size, llama_seq_id seq_id);
size_t llama_state_seq_set_data(struct llama_context * ctx, const uint8_t * src, size_t size, llama_seq_id dest_seq_id);
bool llama_state_load_file(struct llama_context * ctx, const char * path_session, llama_token * tokens_out,
                           size_t n_token_capacity, size_t * n_token_count_out);
bool llama_state_save_file(struct llama_context * ctx, const char * path_session, const llama_token * tokens,
                           size_t n_token_count);

/* LoRA adapters: loaded for one model (freed with it if not before), applied per context, not per sequence */
struct llama_adapter_lora * llama_adapter_lora_init(struct llama_model * model, const char * path_lora);
void llama_adapter_lora_free(struct llama_adapter_lora * adapter);
uint64_t llama_adapter_get_alora_n_invocation_tokens(const struct llama_adapter_lora * adapter);
int32_t llama_set_adapters_lora(struct llama_context * ctx, struct llama_adapter_lora ** adapters, size_t n_adapters,
                                float * scales);

/* decoding */
struct llama_batch llama_batch_get_one(llama_token * tokens, int32_t n_tokens);
struct llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
void    llama_batch_free(struct llama_batch batch);
int32_t llama_encode(struct llama_context * ctx, struct llama_batch batch);
int32_t llama_decode(struct llama_context * ctx, struct llama_batch batch);
float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);
float * llama_get_embeddings_ith(struct llama_context * ctx, int32_t i);
float * llama_get_embeddings_seq(struct llama_context * ctx, llama_seq_id seq_id);

/* vocabulary */
int32_t llama_vocab_n_tokens(const struct llama_vocab * vocab);
bool    llama_vocab_is_eog(const struct llama_vocab * vocab, llama_token token);
llama_token llama_vocab_bos(const struct llama_vocab * vocab);
llama_token llama_vocab_eos(const struct llama_vocab * vocab);
bool    llama_vocab_get_add_bos(const struct llama_vocab * vocab);
/* what a reranker's fallback prompt is made of (llama-server's format_prompt_rerank): [BOS]query[EOS][SEP]doc[EOS] */
llama_token llama_vocab_sep(const struct llama_vocab * vocab);
bool    llama_vocab_get_add_eos(const struct llama_vocab * vocab);
bool    llama_vocab_get_add_sep(const struct llama_vocab * vocab);
/* fill-in-the-middle tokens (LLAMA_TOKEN_NULL, -1, where the vocabulary has none): prefix, suffix, middle, pad,
   repository, file separator */
llama_token llama_vocab_fim_pre(const struct llama_vocab * vocab);
llama_token llama_vocab_fim_suf(const struct llama_vocab * vocab);
llama_token llama_vocab_fim_mid(const struct llama_vocab * vocab);
llama_token llama_vocab_fim_pad(const struct llama_vocab * vocab);
llama_token llama_vocab_fim_rep(const struct llama_vocab * vocab);
llama_token llama_vocab_fim_sep(const struct llama_vocab * vocab);
int32_t llama_tokenize(const struct llama_vocab * vocab, const char * text, int32_t text_len, llama_token * tokens,
                       int32_t n_tokens_max, bool add_special, bool parse_special);
int32_t llama_token_to_piece(const struct llama_vocab * vocab, llama_token token, char * buf, int32_t length,
                             int32_t lstrip, bool special);
int32_t llama_detokenize(const struct llama_vocab * vocab, const llama_token * tokens, int32_t n_tokens, char * text,
                         int32_t text_len_max, bool remove_special, bool unparse_special);
int32_t llama_chat_apply_template(const char * tmpl, const struct llama_chat_message * chat, size_t n_msg,
                                  bool add_ass, char * buf, int32_t length);

/* sampling */
struct llama_sampler * llama_sampler_chain_init(struct llama_sampler_chain_params params);
void llama_sampler_chain_add(struct llama_sampler * chain, struct llama_sampler * smpl);
struct llama_sampler * llama_sampler_init_greedy(void);
struct llama_sampler * llama_sampler_init_dist(uint32_t seed);
struct llama_sampler * llama_sampler_init_top_k(int32_t k);
struct llama_sampler * llama_sampler_init_top_p(float p, size_t min_keep);
struct llama_sampler * llama_sampler_init_min_p(float p, size_t min_keep);
struct llama_sampler * llama_sampler_init_temp(float t);
struct llama_sampler * llama_sampler_init_penalties(int32_t n_vocab, int32_t penalty_last_n, float penalty_repeat,
                                                    float penalty_freq, float penalty_present);
llama_token llama_sampler_sample(struct llama_sampler * smpl, struct llama_context * ctx, int32_t idx);
void llama_sampler_accept(struct llama_sampler * smpl, llama_token token);
void llama_sampler_free(struct llama_sampler * smpl);
