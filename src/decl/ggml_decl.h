/* ggml declarations used by pyllama90a (cffi cdef; API mode checks them against ggml.h). */

enum ggml_type {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
    GGML_TYPE_Q8_0, GGML_TYPE_IQ4_NL, GGML_TYPE_BF16, GGML_TYPE_COUNT, ...
};

enum ggml_log_level {
    GGML_LOG_LEVEL_NONE, GGML_LOG_LEVEL_DEBUG, GGML_LOG_LEVEL_INFO, GGML_LOG_LEVEL_WARN,
    GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_CONT, ...
};

typedef void (*ggml_log_callback)(enum ggml_log_level level, const char * text, void * user_data);
typedef bool (*ggml_abort_callback)(void * data);

struct ggml_context;
struct ggml_cgraph;

struct ggml_init_params {
    size_t mem_size;
    void * mem_buffer;
    bool   no_alloc;
};

struct ggml_tensor {
    enum ggml_type type;
    int64_t ne[4];
    size_t  nb[4];
    struct ggml_tensor * src[10];
    struct ggml_backend_buffer * buffer;  /* where it lives (NULL: not allocated yet) */
    void *  data;
    char    name[64];
    ...;
};

const char * ggml_op_desc(const struct ggml_tensor * t);  /* the op's name, e.g. "MUL_MAT", "OUT_PROD" */

/* called by the scheduler for each graph node (ask=true: "do you want its data?"); the tests record the
   graph's nodes with it to see which path a patch took */
typedef bool (*ggml_backend_sched_eval_callback)(struct ggml_tensor * t, bool ask, void * user_data);

typedef void (*ggml_to_float_t)(const void * x, float * y, int64_t k);
struct ggml_type_traits {
    const char * type_name;
    int64_t      blck_size;
    bool         is_quantized;
    ggml_to_float_t to_float;
    ...;
};

const char * ggml_type_name(enum ggml_type type);
int64_t      ggml_blck_size(enum ggml_type type);
size_t       ggml_type_size(enum ggml_type type);
size_t       ggml_row_size(enum ggml_type type, int64_t ne);
bool         ggml_is_quantized(enum ggml_type type);
const struct ggml_type_traits * ggml_get_type_traits(enum ggml_type type);
size_t ggml_quantize_chunk(enum ggml_type type, const float * src, void * dst, int64_t start,
                           int64_t nrows, int64_t n_per_row, const float * imatrix);

/* graph building, for the op-level tests of the attention branch */
struct ggml_context * ggml_init(struct ggml_init_params params);
void   ggml_free(struct ggml_context * ctx);
size_t ggml_nbytes(const struct ggml_tensor * tensor);
struct ggml_tensor * ggml_new_tensor_4d(struct ggml_context * ctx, enum ggml_type type,
                                        int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
struct ggml_tensor * ggml_view_4d(struct ggml_context * ctx, struct ggml_tensor * a,
                                  int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                                  size_t nb1, size_t nb2, size_t nb3, size_t offset);
struct ggml_tensor * ggml_permute(struct ggml_context * ctx, struct ggml_tensor * a,
                                  int axis0, int axis1, int axis2, int axis3);
struct ggml_tensor * ggml_transpose(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_cont(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_cast(struct ggml_context * ctx, struct ggml_tensor * a, enum ggml_type type);
struct ggml_tensor * ggml_mul_mat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_out_prod(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
/* FLASH_ATTN_EXT, for the CK FlashAttention mapping tests (tests/test_ck_fmha_reference.py) */
struct ggml_tensor * ggml_flash_attn_ext(struct ggml_context * ctx, struct ggml_tensor * q, struct ggml_tensor * k,
                                         struct ggml_tensor * v, struct ggml_tensor * mask, float scale,
                                         float max_bias, float logit_softcap);
struct ggml_cgraph * ggml_new_graph(struct ggml_context * ctx);
void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
enum ggml_status { GGML_STATUS_SUCCESS, ... };

/* backends, to report where attention runs */
typedef struct ggml_backend_device * ggml_backend_dev_t;
enum ggml_backend_dev_type { GGML_BACKEND_DEVICE_TYPE_CPU, GGML_BACKEND_DEVICE_TYPE_GPU, GGML_BACKEND_DEVICE_TYPE_IGPU, ... };
size_t       ggml_backend_dev_count(void);
ggml_backend_dev_t ggml_backend_dev_get(size_t index);
const char * ggml_backend_dev_name(ggml_backend_dev_t device);
const char * ggml_backend_dev_description(ggml_backend_dev_t device);
enum ggml_backend_dev_type ggml_backend_dev_type(ggml_backend_dev_t device);
void ggml_backend_dev_memory(ggml_backend_dev_t device, size_t * free, size_t * total);

/* a backend's own functions by name (tests reach the CUDA backend's test knobs this way) */
typedef struct ggml_backend_reg * ggml_backend_reg_t;
ggml_backend_reg_t ggml_backend_reg_by_name(const char * name);
void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name);

/* the backend registry (ggml-base): backends are modules in a portable build (GGML_BACKEND_DL), so nothing of
   ggml-cpu is linked; its functions are reached through ggml_backend_reg_get_proc_address */
size_t ggml_backend_reg_count(void);
ggml_backend_reg_t ggml_backend_reg_get(size_t index);
const char * ggml_backend_reg_name(ggml_backend_reg_t reg);
size_t ggml_backend_reg_dev_count(ggml_backend_reg_t reg);
ggml_backend_dev_t ggml_backend_reg_dev_get(ggml_backend_reg_t reg, size_t index);
void ggml_backend_load_all_from_path(const char * dir_path);
ggml_backend_dev_t ggml_backend_dev_by_type(enum ggml_backend_dev_type type);
ggml_backend_reg_t ggml_backend_dev_backend_reg(ggml_backend_dev_t device);
typedef struct ggml_backend * ggml_backend_t;
ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t device, const char * params);
void ggml_backend_free(ggml_backend_t backend);
enum ggml_status ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph * cgraph);
/* proc addresses of the CPU backend (ggml-backend.h's typedefs) */
struct ggml_backend_feature { const char * name; const char * value; };
typedef struct ggml_backend_feature * (*ggml_backend_get_features_t)(ggml_backend_reg_t reg);
typedef void (*ggml_backend_set_n_threads_t)(ggml_backend_t backend, int n_threads);
/* buffers of a chosen buffer type (the AMX tests put weights in the CPU's extra buffer types) */
typedef struct ggml_backend_buffer_type * ggml_backend_buffer_type_t;
typedef struct ggml_backend_buffer * ggml_backend_buffer_t;
typedef ggml_backend_buffer_type_t * (*ggml_backend_dev_get_extra_bufts_t)(ggml_backend_dev_t device);
const char * ggml_backend_buft_name(ggml_backend_buffer_type_t buft);
const char * ggml_backend_buffer_name(ggml_backend_buffer_t buffer);  /* its type's name, e.g. "RPC0[host:port]" */
ggml_backend_buffer_t ggml_backend_alloc_ctx_tensors_from_buft(struct ggml_context * ctx,
                                                               ggml_backend_buffer_type_t buft);
void ggml_backend_buffer_free(ggml_backend_buffer_t buffer);
ggml_backend_buffer_type_t ggml_backend_dev_buffer_type(ggml_backend_dev_t device);  /* roofline.copy_bandwidth */
void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
