// pyllama90a wave64 runtime: the host API of HIP that ggml-cuda's code names, over wave64.h (kernels run on
// the CPU, synchronously, at launch; device memory is host memory)
#pragma once
#include "hip/hip_version.h"
#include "wave64.h"
#include "hip/hip_fp16.h"

typedef int hipError_t;
enum { hipSuccess = 0, hipErrorOutOfMemory = 2, hipErrorNotSupported = 801, hipErrorPeerAccessAlreadyEnabled = 704,
       hipErrorPeerAccessNotEnabled = 705, hipErrorInvalidDeviceFunction = 98, hipErrorGraphExecUpdateFailure = 910 };
typedef struct wave64_stream * hipStream_t;
typedef struct wave64_event * hipEvent_t;
typedef struct wave64_graph * hipGraph_t;
typedef struct wave64_graph_exec * hipGraphExec_t;
typedef struct wave64_graph_node * hipGraphNode_t;
typedef int hipDevice_t;
typedef void * hipDeviceptr_t;
typedef unsigned long long hipMemGenericAllocationHandle_t;
struct hipMemAccessDesc { int flags; struct { int type; int id; } location; };
struct hipMemAllocationProp { int type; struct { int type; int id; } location; };
struct hipKernelNodeParams { void * func; dim3 grid_dim, block_dim; unsigned sharedMemBytes; void ** kernelParams; void ** extra; };
enum hipGraphExecUpdateResult { hipGraphExecUpdateSuccess = 0 };
enum hipGraphNodeType { hipGraphNodeTypeKernel = 0 };
enum hipStreamCaptureMode { hipStreamCaptureModeRelaxed = 2 };
enum hipStreamCaptureStatus { hipStreamCaptureStatusNone = 0, hipStreamCaptureStatusActive = 1 };
enum hipMemcpyKind { hipMemcpyHostToHost, hipMemcpyHostToDevice, hipMemcpyDeviceToHost, hipMemcpyDeviceToDevice,
                     hipMemcpyDefault };
enum hipDeviceAttribute_t { hipDeviceAttributeVirtualMemoryManagementSupported, hipDeviceAttributeCooperativeLaunch };
enum hipFuncAttribute { hipFuncAttributeMaxDynamicSharedMemorySize };
enum { hipMemAllocationGranularityRecommended = 1, hipMemAllocationTypePinned = 1, hipMemLocationTypeDevice = 1,
       hipMemAccessFlagsProtReadWrite = 3 };
#define hipStreamNonBlocking 1
#define hipStreamPerThread ((hipStream_t) 2)
#define hipStreamFireAndForget ((hipStream_t) 4)
#define hipEventDisableTiming 2
#define hipHostMallocPortable 1
#define hipHostMallocMapped 2
#define hipHostRegisterPortable 1
#define hipHostRegisterReadOnly 8
#define hipHostMallocDefault 0

struct hipDeviceProp_t {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock;
    int warpSize, multiProcessorCount, major, minor, integrated, cooperativeLaunch, pciBusID, pciDeviceID,
        pciDomainID;
    size_t sharedMemPerBlockOptin;
    char gcnArchName[256];
};

static inline const char * hipGetErrorString(hipError_t e) { return e == hipSuccess ? "no error" : "wave64 error"; }
static inline const char * hipGetErrorName(hipError_t e) { return hipGetErrorString(e); }
static inline hipError_t hipGetLastError() { return hipSuccess; }
static inline hipError_t hipPeekAtLastError() { return hipSuccess; }
static inline hipError_t hipSetDevice(int) { return hipSuccess; }
static inline hipError_t hipGetDevice(int * d) { *d = 0; return hipSuccess; }
static inline hipError_t hipGetDeviceCount(int * n) { *n = 1; return hipSuccess; }
static inline hipError_t hipDeviceSynchronize() { return hipSuccess; }
static inline hipError_t hipStreamSynchronize(hipStream_t) { return hipSuccess; }
static inline hipError_t hipStreamCreateWithFlags(hipStream_t * s, unsigned) { *s = (hipStream_t) 16; return hipSuccess; }
static inline hipError_t hipStreamDestroy(hipStream_t) { return hipSuccess; }
static inline hipError_t hipStreamWaitEvent(hipStream_t, hipEvent_t, unsigned) { return hipSuccess; }
static inline hipError_t hipEventCreateWithFlags(hipEvent_t * e, unsigned) { *e = (hipEvent_t) 16; return hipSuccess; }
static inline hipError_t hipEventRecord(hipEvent_t, hipStream_t = nullptr) { return hipSuccess; }
static inline hipError_t hipEventSynchronize(hipEvent_t) { return hipSuccess; }
static inline hipError_t hipEventDestroy(hipEvent_t) { return hipSuccess; }
static inline hipError_t hipMalloc(void ** p, size_t n) {
    *p = ::wave64::device_alloc(n);
    return *p ? hipSuccess : hipErrorOutOfMemory;
}
template <typename T> static inline hipError_t hipMalloc(T ** p, size_t n) { return hipMalloc((void **) p, n); }
static inline hipError_t hipFree(void * p) { ::wave64::device_free(p); return hipSuccess; }
static inline hipError_t hipMemcpy(void * d, const void * s, size_t n, hipMemcpyKind) { memcpy(d, s, n); return hipSuccess; }
static inline hipError_t hipMemcpyAsync(void * d, const void * s, size_t n, hipMemcpyKind, hipStream_t = nullptr) {
    memcpy(d, s, n);
    return hipSuccess;
}
static inline hipError_t hipMemset(void * d, int v, size_t n) { memset(d, v, n); return hipSuccess; }
static inline hipError_t hipMemsetAsync(void * d, int v, size_t n, hipStream_t = nullptr) { memset(d, v, n); return hipSuccess; }
static inline hipError_t hipMemGetInfo(size_t * f, size_t * t) { *f = *t = (size_t) 64 << 30; return hipSuccess; }
static inline hipError_t hipFuncSetAttribute(const void *, hipFuncAttribute, int) { return hipSuccess; }
static inline hipError_t hipDeviceGetAttribute(int * v, hipDeviceAttribute_t, int) { *v = 0; return hipSuccess; }
static inline hipError_t hipGetDeviceProperties(hipDeviceProp_t * p, int) { memset(p, 0, sizeof(*p)); return hipSuccess; }
static inline hipError_t hipLaunchHostFunc(hipStream_t, void (*fn)(void *), void * data) { fn(data); return hipSuccess; }
static inline hipError_t hipStreamIsCapturing(hipStream_t, hipStreamCaptureStatus * s) {
    *s = hipStreamCaptureStatusNone;
    return hipSuccess;
}
static inline hipError_t hipGraphExecDestroy(hipGraphExec_t) { return hipSuccess; }
static inline hipError_t hipGraphDestroy(hipGraph_t) { return hipSuccess; }
template <typename F> static inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int * n, F, int, size_t) {
    *n = 1;
    return hipSuccess;
}
