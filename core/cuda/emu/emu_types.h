// core/cuda/emu/emu_types.h — the plain types of the CUDA runtime API as the emulator spells them:
// dim3/uint3, the vector types (float4... with CUDA's alignment), error codes, memcpy kinds,
// stream/event handles, device properties. Names and enum values follow CUDA's own headers.
#pragma once
#include <cstddef>
#include <cstdint>

// ---- grid geometry ----
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---- vector types: CUDA's members and alignment; make_<type>() builders ----
#define CUEMU_VEC1(T, B, A) \
  struct alignas(A) T { B x; };                                             \
  inline T make_##T(B x) { return T{x}; }
#define CUEMU_VEC2(T, B, A) \
  struct alignas(A) T { B x, y; };                                          \
  inline T make_##T(B x, B y) { return T{x, y}; }
#define CUEMU_VEC3(T, B) \
  struct T { B x, y, z; };                                                  \
  inline T make_##T(B x, B y, B z) { return T{x, y, z}; }
#define CUEMU_VEC4(T, B, A) \
  struct alignas(A) T { B x, y, z, w; };                                    \
  inline T make_##T(B x, B y, B z, B w) { return T{x, y, z, w}; }
#define CUEMU_VEC_FAMILY(P, B)                                   \
  CUEMU_VEC1(P##1, B, sizeof(B))                                 \
  CUEMU_VEC2(P##2, B, 2 * sizeof(B))                             \
  CUEMU_VEC3(P##3, B)                                            \
  CUEMU_VEC4(P##4, B, (4 * sizeof(B) > 16 ? 16 : 4 * sizeof(B)))
CUEMU_VEC_FAMILY(char, signed char)
CUEMU_VEC_FAMILY(uchar, unsigned char)
CUEMU_VEC_FAMILY(short, short)
CUEMU_VEC_FAMILY(ushort, unsigned short)
CUEMU_VEC_FAMILY(int, int)
CUEMU_VEC_FAMILY(float, float)
CUEMU_VEC_FAMILY(longlong, long long)
CUEMU_VEC_FAMILY(ulonglong, unsigned long long)
CUEMU_VEC_FAMILY(double, double)
CUEMU_VEC1(uint1, unsigned, 4)
CUEMU_VEC2(uint2, unsigned, 8)
CUEMU_VEC4(uint4, unsigned, 16)
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
#undef CUEMU_VEC_FAMILY
#undef CUEMU_VEC1
#undef CUEMU_VEC2
#undef CUEMU_VEC3
#undef CUEMU_VEC4
static_assert(alignof(float4) == 16 && sizeof(float4) == 16, "float4 must be 16-byte aligned as in CUDA");
static_assert(alignof(float2) == 8 && alignof(double2) == 16 && alignof(int4) == 16, "vector alignment");

// ---- error codes (values as in CUDA's driver_types.h) ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12,
  cudaErrorInvalidSymbol = 13,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorAssert = 710,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  // stream capture and graphs
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureMerge = 902,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorTimeout = 909,
  cudaErrorGraphExecUpdateFailure = 910,
  cudaErrorUnknown = 999,
};
typedef cudaError_t cudaError;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxBlockDimX = 2,
  cudaDevAttrMaxBlockDimY = 3,
  cudaDevAttrMaxBlockDimZ = 4,
  cudaDevAttrMaxGridDimX = 5,
  cudaDevAttrMaxGridDimY = 6,
  cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

// Streams and events are handles to emulator objects; 0 is the default stream.
struct CUstream_st;
struct CUevent_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaEventWaitDefault 0x00
#define cudaEventWaitExternal 0x01

// ---- stream capture and CUDA Graphs (core/cuda/emu/graph.cpp) ----
struct CUgraph_st;
struct CUgraphExec_st;
typedef CUgraph_st* cudaGraph_t;
typedef CUgraphExec_st* cudaGraphExec_t;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
enum cudaGraphInstantiateFlags {
  cudaGraphInstantiateFlagAutoFreeOnLaunch = 1,
  cudaGraphInstantiateFlagUpload = 2,
  cudaGraphInstantiateFlagDeviceLaunch = 4,
  cudaGraphInstantiateFlagUseNodePriority = 8,
};

// The subset of cudaDeviceProp that code reads (an H100-like device whose name says "emulated").
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  size_t memPitch;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  size_t totalConstMem;
  int major;
  int minor;
  size_t textureAlignment;
  int multiProcessorCount;
  int integrated;
  int canMapHostMemory;
  int concurrentKernels;
  int l2CacheSize;
  int maxThreadsPerMultiProcessor;
  int memoryBusWidth;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor;
  int managedMemory;
  int unifiedAddressing;
  size_t sharedMemPerBlockOptin;
  int maxBlocksPerMultiProcessor;
};
