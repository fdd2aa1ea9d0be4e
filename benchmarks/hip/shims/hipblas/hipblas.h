// pyllama90a compile-only shim: the hipBLAS declarations that ggml-cuda (through vendors/hip.h) uses,
// for compiling with Debian's HIP 5.2.3, which ships no hipBLAS. Declarations only, no definitions:
// objects compiled against this header are for a compile check and must not be linked or run.
// The API shape is the hipblasDatatype_t one (what vendors/hip.h selects for HIP < 6.5); the enum
// values are placeholders, not hipBLAS's ABI.
#pragma once

#include <stdint.h>
#include <hip/hip_runtime_api.h>

typedef void *  hipblasHandle_t;
typedef int64_t hipblasStride;

typedef enum {
    HIPBLAS_STATUS_SUCCESS,
    HIPBLAS_STATUS_NOT_INITIALIZED,
    HIPBLAS_STATUS_ALLOC_FAILED,
    HIPBLAS_STATUS_INVALID_VALUE,
    HIPBLAS_STATUS_MAPPING_ERROR,
    HIPBLAS_STATUS_EXECUTION_FAILED,
    HIPBLAS_STATUS_INTERNAL_ERROR,
    HIPBLAS_STATUS_NOT_SUPPORTED,
    HIPBLAS_STATUS_ARCH_MISMATCH,
} hipblasStatus_t;

typedef enum { HIPBLAS_OP_N, HIPBLAS_OP_T, HIPBLAS_OP_C } hipblasOperation_t;
typedef enum { HIPBLAS_FILL_MODE_UPPER, HIPBLAS_FILL_MODE_LOWER } hipblasFillMode_t;
typedef enum { HIPBLAS_DIAG_NON_UNIT, HIPBLAS_DIAG_UNIT } hipblasDiagType_t;
typedef enum { HIPBLAS_SIDE_LEFT, HIPBLAS_SIDE_RIGHT } hipblasSideMode_t;
typedef enum { HIPBLAS_R_16F, HIPBLAS_R_32F, HIPBLAS_R_64F, HIPBLAS_R_16B } hipblasDatatype_t;
typedef enum { HIPBLAS_GEMM_DEFAULT } hipblasGemmAlgo_t;

#ifdef __cplusplus
extern "C" {
#endif

hipblasStatus_t hipblasCreate(hipblasHandle_t * handle);
hipblasStatus_t hipblasDestroy(hipblasHandle_t handle);
hipblasStatus_t hipblasSetStream(hipblasHandle_t handle, hipStream_t stream);

hipblasStatus_t hipblasSgemm(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb,
                             int m, int n, int k, const float * alpha, const float * A, int lda,
                             const float * B, int ldb, const float * beta, float * C, int ldc);
hipblasStatus_t hipblasSgemmBatched(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb,
                                    int m, int n, int k, const float * alpha, const float * const A[], int lda,
                                    const float * const B[], int ldb, const float * beta, float * const C[], int ldc,
                                    int batch_count);
hipblasStatus_t hipblasSgemmStridedBatched(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb,
                                           int m, int n, int k, const float * alpha,
                                           const float * A, int lda, hipblasStride stride_a,
                                           const float * B, int ldb, hipblasStride stride_b, const float * beta,
                                           float * C, int ldc, hipblasStride stride_c, int batch_count);
hipblasStatus_t hipblasGemmEx(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb,
                              int m, int n, int k, const void * alpha,
                              const void * A, hipblasDatatype_t a_type, int lda,
                              const void * B, hipblasDatatype_t b_type, int ldb, const void * beta,
                              void * C, hipblasDatatype_t c_type, int ldc,
                              hipblasDatatype_t compute_type, hipblasGemmAlgo_t algo);
hipblasStatus_t hipblasGemmBatchedEx(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb,
                                     int m, int n, int k, const void * alpha,
                                     const void * A[], hipblasDatatype_t a_type, int lda,
                                     const void * B[], hipblasDatatype_t b_type, int ldb, const void * beta,
                                     void * C[], hipblasDatatype_t c_type, int ldc, int batch_count,
                                     hipblasDatatype_t compute_type, hipblasGemmAlgo_t algo);
hipblasStatus_t hipblasGemmStridedBatchedEx(hipblasHandle_t handle, hipblasOperation_t transa, hipblasOperation_t transb,
                                            int m, int n, int k, const void * alpha,
                                            const void * A, hipblasDatatype_t a_type, int lda, hipblasStride stride_a,
                                            const void * B, hipblasDatatype_t b_type, int ldb, hipblasStride stride_b,
                                            const void * beta,
                                            void * C, hipblasDatatype_t c_type, int ldc, hipblasStride stride_c,
                                            int batch_count, hipblasDatatype_t compute_type, hipblasGemmAlgo_t algo);
hipblasStatus_t hipblasStrsmBatched(hipblasHandle_t handle, hipblasSideMode_t side, hipblasFillMode_t uplo,
                                    hipblasOperation_t transa, hipblasDiagType_t diag, int m, int n,
                                    const float * alpha, const float * const A[], int lda,
                                    float * const B[], int ldb, int batch_count);

#ifdef __cplusplus
}
#endif
