# Local stand-in for nvidia/cuda:13.0-devel (no registry here): Debian 12 + the host's CUDA 13.0 toolkit,
# with the cuBLAS/cuSPARSE/cuSOLVER/cuRAND/cuFFT headers from the matching NVIDIA wheels.
FROM apex-toolchain/base:bookworm
COPY cuda-13.0 /usr/local/cuda-13.0
RUN ln -s /usr/local/cuda-13.0 /usr/local/cuda
ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin CUDA_HOME=/usr/local/cuda
