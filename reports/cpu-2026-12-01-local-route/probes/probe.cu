#include <cmath>
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(float *x) { x[threadIdx.x] = rsqrtf(x[threadIdx.x]) + sinpif(x[threadIdx.x]); }
int main() { std::printf("%f\n", std::cos(1.0)); return 0; }
