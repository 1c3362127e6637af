/*
 * spin.cu — a GPU-side delay for the op profiler's prefill mode (op_profile.h): one thread
 * waits on the global timer, so the host can queue a whole action behind it and the marks then
 * time the kernels alone, without host launch gaps.
 */
#include <cuda_runtime.h>

#include "cuda/op_profile.h"

__global__ void spin_kernel(unsigned long long ns) {
    unsigned long long start = 0, now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

extern "C" cudaError_t gt_cu_spin(unsigned long long ns, cudaStream_t stream) {
    spin_kernel<<<1, 1, 0, stream>>>(ns);
    return cudaGetLastError();
}
