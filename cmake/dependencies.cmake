# Every dependency comes from Debian 12's packages (scripts/setup.sh installs them); CUDA and
# NCCL from /usr/local/cuda when nvcc is found. See docs/architecture.md for who uses what.
find_package(Threads REQUIRED)

# OpenBLAS: CPU GEMM (kernels/cpu/gemm.cpp).
find_package(OpenBLAS CONFIG REQUIRED)
add_library(actorch_openblas INTERFACE)
target_include_directories(actorch_openblas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(actorch_openblas INTERFACE ${OpenBLAS_LIBRARIES})

# CAF 0.17: Debian ships no CMake config, so the imported targets are made here.
# ACTORCH_CAF_ROOT, when set, is searched first: the tsan preset points it at the
# TSan-instrumented CAF that scripts/build-tsan-caf.sh installs (Debian's is not instrumented).
set(ACTORCH_CAF_ROOT "" CACHE PATH "A CAF 0.17 install to use instead of Debian's")
if(ACTORCH_CAF_ROOT)
  list(PREPEND CMAKE_PREFIX_PATH ${ACTORCH_CAF_ROOT})
endif()
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIB caf_core REQUIRED)
add_library(CAF::core UNKNOWN IMPORTED)
# INTERFACE_INCLUDE_DIRECTORIES too: the SYSTEM property alone adds no -isystem flag, which
# went unnoticed while CAF lived in /usr/include (an ACTORCH_CAF_ROOT elsewhere needs it).
set_target_properties(CAF::core PROPERTIES IMPORTED_LOCATION ${CAF_CORE_LIB}
  INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR}
  INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES Threads::Threads)

# OpenSSL's libcrypto: HMAC-SHA256 and random bytes for the store's job secret (comm/store).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

# Gloo: CPU collectives (comm/). The target is `gloo`, without a namespace.
find_package(Gloo CONFIG REQUIRED)

# moodycamel's concurrent queue: header-only, under concurrentqueue/.
find_path(CONCURRENTQUEUE_INCLUDE_DIR concurrentqueue/blockingconcurrentqueue.h REQUIRED)
add_library(actorch_concurrentqueue INTERFACE)
target_include_directories(actorch_concurrentqueue SYSTEM INTERFACE
  ${CONCURRENTQUEUE_INCLUDE_DIR})

# DLPack 0.6: header-only, zero-copy tensor exchange (core/dlpack.hpp).
find_package(dlpack CONFIG REQUIRED)

# CLI11 for the actorch command line.
find_package(CLI11 CONFIG REQUIRED)

# CUDA and NCCL: optional, ON where nvcc is found.
set(ACTORCH_HAVE_CUDA OFF)
if(ACTORCH_ENABLE_CUDA)
  # NVIDIA's installer puts nvcc under /usr/local/cuda/bin without adding it to PATH: look
  # there too, unless the user named a compiler (CUDACXX or CMAKE_CUDA_COMPILER).
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(ACTORCH_NVCC nvcc PATHS /usr/local/cuda/bin)
    if(ACTORCH_NVCC)
      set(ENV{CUDACXX} ${ACTORCH_NVCC})
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Hopper (H100, H200), the GPUs actorch is checked on; -DCMAKE_CUDA_ARCHITECTURES=... for
    # others. One architecture keeps CI's compile of the kernels short.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 flag for nvcc (DEPENDENCIES.md) and would refuse the CUDA20
    # dialect that CMAKE_CXX_STANDARD implies for .cu files: nvcc 12+ takes -std=c++20.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    # Debian 12's CMake 3.25.1 sets a deprecation property on CUDA::nvToolsExt whenever the
    # project requires CMake 3.25, without checking that the target exists (fixed upstream in
    # 3.25.2); CUDA 13 ships no libnvToolsExt, so configure failed. The check reads
    # CMAKE_MINIMUM_REQUIRED_VERSION, so the search runs with it below 3.25.
    set(actorch_min_version ${CMAKE_MINIMUM_REQUIRED_VERSION})
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_MINIMUM_REQUIRED_VERSION ${actorch_min_version})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
      INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    set(ACTORCH_HAVE_CUDA ON)
  else()
    message(STATUS "actorch: nvcc not found, building without CUDA")
  endif()
endif()

# Catch2 v2 for the tests.
if(ACTORCH_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# zlib: the gzipped digits CSV (core/data/digits_dataset.cpp). SQLite3: the example data-source
# actor (examples/sqlite_source.*).
find_package(ZLIB REQUIRED)
find_package(SQLite3 REQUIRED)
# libjpeg (libjpeg-turbo's libjpeg API: cropped and scaled decoding) and libpng: image decoding
# in the loader's workers (core/data/vision/decode.cpp).
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
