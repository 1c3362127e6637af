# cuda_backend.cmake — the CUDA build of libgantry_native.so (included by CMakeLists.txt when
# GANTRY_BACKEND=cuda): the stage API on the GPU (bf16 kernels, cuBLASLt products, cuDNN flash
# attention) and the NCCL communicator, (gantry-native-check is CPU-only).
#
# Options:
#   GANTRY_CUDA_ARCHS          architectures, e.g. "90a" (the site's build.cuda_archs); each gives
#                              -gencode=arch=compute_X,code=sm_X
#   GANTRY_CUDNN               ON: fused flash attention through cuDNN (needs cudnn.h, libcudnn
#                              and the cudnn-frontend headers, GANTRY_CUDNN_FRONTEND_DIR)
#   GANTRY_CUDNN_FRONTEND_DIR  directory holding cudnn_frontend.h (scripts/fetch_cudnn_frontend.sh)
#   GANTRY_NCCL                ON: build comm_nccl.c (needs nccl.h, libnccl and MPI)
enable_language(CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(GANTRY_CUDA_ARCHS "90a" CACHE STRING "CUDA architectures (site build.cuda_archs)")
option(GANTRY_CUDNN "cuDNN flash attention" ON)
set(GANTRY_CUDNN_FRONTEND_DIR "" CACHE PATH "directory holding cudnn_frontend.h")
option(GANTRY_NCCL "NCCL communicator" ON)

set(CMAKE_CUDA_ARCHITECTURES OFF)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
foreach(arch ${GANTRY_CUDA_ARCHS})
  string(APPEND CMAKE_CUDA_FLAGS " -gencode=arch=compute_${arch},code=sm_${arch}")
endforeach()
string(APPEND CMAKE_CUDA_FLAGS " -lineinfo -Xcompiler=-fvisibility=hidden")

# the stage's kernels, one file per operation (kernels.h); the kernel bench compiles them too
set(GANTRY_CUDA_KERNELS
  src/cuda/convert.cu
  src/cuda/embedding.cu
  src/cuda/layernorm_forward.cu
  src/cuda/layernorm_backward.cu
  src/cuda/gelu.cu
  src/cuda/attention_reference.cu
  src/cuda/adamw.cu)
set(GANTRY_CUDA_SOURCES
  src/error.c
  src/safetensors.c
  src/shard.c
  src/stage_layout.c
  src/dp_buckets.c
  src/stage_checks.c
  src/env_flag.c
  src/runtime_config.c
  src/stage_io.c
  src/optim_common.c
  src/stage_slots.c
  src/cuda/stage_cuda.c
  src/cuda/compute_cuda.c
  src/cuda/grad_restart.c
  src/cuda/matmul.c
  src/cuda/op_profile.c
  src/cuda/graph_cache.c
  src/cuda/spin.cu
  src/cuda/crossentropy.cu
  ${GANTRY_CUDA_KERNELS})

set(GANTRY_CUDA_LIBS CUDA::cudart CUDA::cublasLt m)
set(GANTRY_CUDA_DEFS _GNU_SOURCE)
set(GANTRY_CUDA_INCLUDES "")
if(GANTRY_CUDNN)
  find_path(GANTRY_CUDNN_INCLUDE cudnn.h PATH_SUFFIXES x86_64-linux-gnu aarch64-linux-gnu
            HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(GANTRY_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT GANTRY_CUDNN_INCLUDE OR NOT GANTRY_CUDNN_LIBRARY)
    message(FATAL_ERROR "GANTRY_CUDNN=ON but cudnn.h / libcudnn were not found (install cuDNN 9 or -DGANTRY_CUDNN=OFF)")
  endif()
  if(NOT GANTRY_CUDNN_FRONTEND_DIR OR NOT EXISTS "${GANTRY_CUDNN_FRONTEND_DIR}/cudnn_frontend.h")
    message(FATAL_ERROR "GANTRY_CUDNN=ON needs GANTRY_CUDNN_FRONTEND_DIR with cudnn_frontend.h (scripts/fetch_cudnn_frontend.sh), or -DGANTRY_CUDNN=OFF")
  endif()
  list(APPEND GANTRY_CUDA_SOURCES src/cuda/attention_cudnn.cpp)
  list(APPEND GANTRY_CUDA_DEFS GANTRY_HAVE_CUDNN)
  list(APPEND GANTRY_CUDA_LIBS ${GANTRY_CUDNN_LIBRARY} CUDA::nvrtc)
  set_source_files_properties(src/cuda/attention_cudnn.cpp PROPERTIES
    INCLUDE_DIRECTORIES "${GANTRY_CUDNN_FRONTEND_DIR};${GANTRY_CUDNN_INCLUDE}"
    COMPILE_OPTIONS "-Wno-deprecated-declarations;-Wno-unused-function")
endif()
if(GANTRY_NCCL AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/src/comm_nccl.c")
  find_package(MPI REQUIRED COMPONENTS C)
  find_path(GANTRY_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(GANTRY_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT GANTRY_NCCL_INCLUDE OR NOT GANTRY_NCCL_LIBRARY)
    message(FATAL_ERROR "GANTRY_NCCL=ON but nccl.h / libnccl were not found (or -DGANTRY_NCCL=OFF)")
  endif()
  list(APPEND GANTRY_CUDA_SOURCES src/comm_host.c src/comm_nccl.c src/p2p_ce.c)
  if(EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/src/pipeline.c")
    list(APPEND GANTRY_CUDA_SOURCES src/pipeline.c)
  endif()
  list(APPEND GANTRY_CUDA_INCLUDES ${GANTRY_NCCL_INCLUDE})
  # CUDA::cuda_driver: stream memory operations of the copy-engine pipeline edges (p2p_ce.c)
  list(APPEND GANTRY_CUDA_LIBS ${GANTRY_NCCL_LIBRARY} MPI::MPI_C CUDA::cuda_driver)
endif()

add_library(gantry_native SHARED ${GANTRY_CUDA_SOURCES})
target_include_directories(gantry_native PUBLIC include PRIVATE src ${GANTRY_CUDA_INCLUDES})
target_compile_definitions(gantry_native PRIVATE ${GANTRY_CUDA_DEFS})
target_compile_options(gantry_native PRIVATE
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Werror -fvisibility=hidden>
  $<$<COMPILE_LANGUAGE:CXX>:-fvisibility=hidden>)
target_link_libraries(gantry_native PRIVATE ${GANTRY_CUDA_LIBS})
# Keep the C++ runtime private: a toolchain that links libstdc++ statically (the lent H200
# image's /opt/gcc does) would otherwise export all of libstdc++ from this library, and in a
# process that already has libstdc++.so (Python with numpy, torch) the two copies interpose
# each other's symbols: cuDNN frontend code then crashed in std::ostream inside
# gt_stage_create. Hide archive symbols and bind the library's own references locally.
target_link_options(gantry_native PRIVATE "LINKER:--exclude-libs,ALL" "LINKER:-Bsymbolic")
if(GANTRY_SITE_INCLUDE_DIR)
  target_include_directories(gantry_native PRIVATE "${GANTRY_SITE_INCLUDE_DIR}")
  target_compile_definitions(gantry_native PRIVATE GANTRY_HAVE_SITE_H=1)
endif()

# gantry-native-check passes host activations between stages: CPU build only.
add_executable(gantry-cuda-smoke tools/gantry_cuda_smoke.c)
target_compile_options(gantry-cuda-smoke PRIVATE -Wall -Wextra -Werror)
target_link_libraries(gantry-cuda-smoke PRIVATE gantry_native m)

# gantry-kernel-bench times the library's kernels and the dev tools' variants of them
# (dev/cuda) at a model's shapes and checks they agree (bench/run_gpu_bench.sh kernels). The
# library hides its symbols, so the tool compiles the kernel sources itself (same flags and
# architectures as the library's CUDA sources).
add_executable(gantry-kernel-bench tools/gantry_kernel_bench.cu
  dev/cuda/layernorm_backward_variants.cu ${GANTRY_CUDA_KERNELS})
target_include_directories(gantry-kernel-bench PRIVATE include src src/cuda dev/cuda)
target_link_libraries(gantry-kernel-bench PRIVATE CUDA::cudart m)
