#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 800)
#define NAPKIN_ASYNC 0   // sm_75: plain 16-byte loads, one shared-memory buffer, m16n8k8 fp16 mma
#else
#define NAPKIN_ASYNC 1   // sm_80+: cp.async into `stages` buffers, m16n8k16 fp16 and bf16 mma
#endif

#define NAPKIN_ERR_BF16 (-1)
#define NAPKIN_ERR_SMEM (-2)
#define NAPKIN_ERR_SIZE (-3)
#define NAPKIN_ERR_DTYPE (-4)
#define NAPKIN_ERR_GRID (-5)

namespace napkin {

template <typename T> struct Num;
template <> struct Num<__half> {
  static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half of(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};
template <> struct Num<__nv_bfloat16> {
  static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 of(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

// D += A B on the tensor cores: A 16x16 (row), B 16x8 (col), fp32 accumulators c[4].
template <typename T> __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                                          uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
#if NAPKIN_ASYNC
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
               "{%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(b0));
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}
template <> __device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                               uint32_t b0, uint32_t b1) {
#if NAPKIN_ASYNC
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
               "{%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // bf16 tensor cores need sm_80; the launcher refuses bf16 below it
#endif
}

// Four 8x8 matrices of 16-bit elements from shared memory into mma fragments (.trans: transposed).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t s) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t s) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// GMEM -> SMEM, 16 bytes: cp.async (sm_80+) or a plain vector load (sm_75).
__device__ __forceinline__ void cp16(void* dst, const void* src) {
#if NAPKIN_ASYNC
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(src) : "memory");
#else
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
__device__ __forceinline__ void commit() {
#if NAPKIN_ASYNC
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void wait() {
#if NAPKIN_ASYNC
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

// Eight consecutive elements of which the first `nv` are inside the array; the rest are zero.
template <typename T> __device__ __forceinline__ void copy8(T* dst, const T* src, int nv) {
  if (nv >= 8) {
    cp16(dst, src);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) dst[e] = e < nv ? src[e] : Num<T>::of(0.f);
  }
}

// Shared-memory tiles are [rows][W] with the 16-byte chunks of each row XOR-swizzled, so that
// ldmatrix and the 16-byte stores of eight consecutive rows hit distinct banks.
template <int W> __device__ __forceinline__ int swz(int r, int c) {
  constexpr int CH = W / 8;
  if constexpr (CH >= 8) {
    return r * W + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
  } else if constexpr (CH <= 1) {
    return r * W + c;
  } else {
    constexpr int RPL = 8 / CH;
    return r * W + ((((c >> 3) ^ ((r / RPL) & (CH - 1)))) << 3) + (c & 7);
  }
}

// The chunk bits the swizzle XORs: chunk c of a row is at c ^ x with x <= swz_m<W>().
template <int W> constexpr __host__ __device__ int swz_m() {
  return W / 8 >= 8 ? 7 : (W / 8 > 1 ? W / 8 - 1 : 0);
}

__device__ __forceinline__ float ex2(float x) {  // 2^x; ex2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
template <int NW, bool MAX> __device__ __forceinline__ float block_reduce(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, w) : v + w;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[0];
#pragma unroll
  for (int w = 1; w < NW; ++w) v = MAX ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

__device__ __forceinline__ float exp_(float x) { return __expf(x); }
__device__ __forceinline__ float sigmoid(float x) { return __frcp_rn(1.f + __expf(-x)); }
__device__ __forceinline__ float relu(float x) { return fmaxf(x, 0.f); }
__device__ __forceinline__ float rcp(float x) { return __frcp_rn(x); }
__device__ __forceinline__ float rsqrt_(float x) { return rsqrtf(x); }
// GELU, tanh form: 0.5 x (1 + tanh u) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
__device__ __forceinline__ float gelu(float x) {
  return x * sigmoid(1.5957691216057308f * (x + 0.044715f * x * x * x));
}

inline bool aligned(const void* p, int bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int device_major() {
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  return major;
}
inline int smem_optin() {
  int dev = 0, bytes = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  return bytes;
}

}  // namespace napkin

extern "C" int napkin_set_device(int device) { return (int)cudaSetDevice(device); }
