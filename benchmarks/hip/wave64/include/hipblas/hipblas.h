// pyllama90a wave64 runtime: hipBLAS's names that ggml-cuda's headers mention (no BLAS runs in the harness)
#pragma once
typedef struct wave64_blas * hipblasHandle_t;
typedef int hipblasStatus_t;
enum { HIPBLAS_STATUS_SUCCESS = 0, HIPBLAS_STATUS_NOT_INITIALIZED, HIPBLAS_STATUS_ALLOC_FAILED,
       HIPBLAS_STATUS_INVALID_VALUE, HIPBLAS_STATUS_ARCH_MISMATCH, HIPBLAS_STATUS_MAPPING_ERROR,
       HIPBLAS_STATUS_EXECUTION_FAILED, HIPBLAS_STATUS_INTERNAL_ERROR, HIPBLAS_STATUS_NOT_SUPPORTED };
typedef int hipblasComputeType_t;
typedef int hipblasDatatype_t;
typedef int hipDataType;
enum { HIPBLAS_COMPUTE_16F, HIPBLAS_COMPUTE_32F, HIPBLAS_COMPUTE_32F_FAST_16F };
enum { HIPBLAS_R_16F = 150, HIPBLAS_R_32F = 151, HIPBLAS_R_16B = 168, HIP_R_16F = 150, HIP_R_32F = 151, HIP_R_16BF = 168 };
enum { HIPBLAS_OP_N = 111, HIPBLAS_OP_T = 112 };
enum { HIPBLAS_GEMM_DEFAULT = 160 };
enum { HIPBLAS_SIDE_RIGHT = 142, HIPBLAS_FILL_MODE_UPPER = 121, HIPBLAS_DIAG_NON_UNIT = 131 };
static inline const char * hipblasStatusToString(hipblasStatus_t) { return "hipblas (not in the wave64 harness)"; }
static inline hipblasStatus_t hipblasCreate(hipblasHandle_t * h) { *h = nullptr; return HIPBLAS_STATUS_NOT_SUPPORTED; }
static inline hipblasStatus_t hipblasDestroy(hipblasHandle_t) { return HIPBLAS_STATUS_SUCCESS; }
template <typename S> static inline hipblasStatus_t hipblasSetStream(hipblasHandle_t, S) { return HIPBLAS_STATUS_SUCCESS; }
typedef int hipblasOperation_t;
// the GEMMs (OUT_PROD's prefill path) do not run here: reaching one fails the call
template <typename... A> static inline hipblasStatus_t hipblasSgemm(A...) { return HIPBLAS_STATUS_NOT_SUPPORTED; }
template <typename... A> static inline hipblasStatus_t hipblasSgemmBatched(A...) { return HIPBLAS_STATUS_NOT_SUPPORTED; }
template <typename... A> static inline hipblasStatus_t hipblasSgemmStridedBatched(A...) {
    return HIPBLAS_STATUS_NOT_SUPPORTED;
}
