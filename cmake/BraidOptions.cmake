# Optional components: each BRAID_WITH_<X> is AUTO (use it when found), ON (fail when missing)
# or OFF. The result is one generated header, braid/core/config.h, with #cmakedefine01 flags.
include(CheckLanguage)
include(BraidFindCUDAToolkit)  # braid_find_cuda_toolkit(): find_package(CUDAToolkit) that works with CUDA 13

set(_braid_components CUDA HIP NCCL UCX MPI)
foreach(c IN LISTS _braid_components)
  set(BRAID_WITH_${c} AUTO CACHE STRING "Build the ${c} component: AUTO, ON or OFF")
  set_property(CACHE BRAID_WITH_${c} PROPERTY STRINGS AUTO ON OFF)
  if(NOT BRAID_WITH_${c} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "BRAID_WITH_${c}=${BRAID_WITH_${c}}: expected AUTO, ON or OFF")
  endif()
endforeach()

# _braid_resolve(<component> <found> <why-not>): sets BRAID_HAVE_<component> to 0 or 1.
function(_braid_resolve c found why)
  set(mode ${BRAID_WITH_${c}})
  if(mode STREQUAL "OFF")
    set(BRAID_HAVE_${c} 0 PARENT_SCOPE)
    set(BRAID_STATUS_${c} "OFF (disabled)" PARENT_SCOPE)
  elseif(found)
    set(BRAID_HAVE_${c} 1 PARENT_SCOPE)
    set(BRAID_STATUS_${c} "ON (${mode})" PARENT_SCOPE)
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "BRAID_WITH_${c}=ON but ${c} was not found: ${why}")
  else()
    set(BRAID_HAVE_${c} 0 PARENT_SCOPE)
    set(BRAID_STATUS_${c} "OFF (AUTO: ${why})" PARENT_SCOPE)
  endif()
endfunction()

# CUDA: the toolkit and a working nvcc. Architectures must be explicit: "native" fails with no GPU.
set(_found FALSE)
set(_why "no CUDA compiler")
if(NOT BRAID_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    braid_find_cuda_toolkit()
    if(CUDAToolkit_FOUND)
      set(_found TRUE)
    else()
      set(_why "nvcc found but not the CUDA toolkit libraries")
    endif()
  endif()
endif()
_braid_resolve(CUDA ${_found} "${_why}")
# CUDA becomes a language of the whole build here, at the top level: kernels/ compiles .cu
# files and everything linking braid_kernels (tests, bench/) links their objects.
# CMAKE_CUDA_ARCHITECTURES is the user's (-D...); unset, 80;90 (A100, H100/H200) builds fast
# and runs on any GPU of those generations or newer through PTX JIT.
if(BRAID_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "GPU architectures for CUDA code (80;90)")
  endif()
  # One shared cudart, the library CUDA::cudart names (CMake's default is a static copy).
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  # After enable_language: its compiler check must not be asked for a dialect yet. CMake 3.25
  # does not know nvcc's C++20 flag (3.26 does), so it is told.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND NOT CMAKE_CUDA_SIMULATE_ID STREQUAL "MSVC")
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
endif()

# HIP: hipcc (Debian's hipcc) is enough for compile checks.
find_program(BRAID_HIPCC hipcc)
if(BRAID_HIPCC)
  _braid_resolve(HIP TRUE "")
else()
  _braid_resolve(HIP FALSE "hipcc not found")
endif()

# NCCL: only meaningful with CUDA.
set(_found FALSE)
set(_why "needs CUDA")
if(BRAID_HAVE_CUDA)
  find_library(BRAID_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(BRAID_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(BRAID_NCCL_LIBRARY AND BRAID_NCCL_INCLUDE)
    set(_found TRUE)
  else()
    set(_why "libnccl / nccl.h not found next to the CUDA toolkit")
  endif()
endif()
_braid_resolve(NCCL ${_found} "${_why}")

find_package(PkgConfig QUIET)
set(_found FALSE)
if(PkgConfig_FOUND AND NOT BRAID_WITH_UCX STREQUAL "OFF")
  pkg_check_modules(UCX QUIET IMPORTED_TARGET ucx)
  set(_found ${UCX_FOUND})
endif()
_braid_resolve(UCX "${_found}" "pkg-config module ucx not found (apt-get install libucx-dev)")

set(_found FALSE)
if(NOT BRAID_WITH_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS C CXX)
  set(_found ${MPI_CXX_FOUND})
endif()
_braid_resolve(MPI "${_found}" "MPI not found (apt-get install libopenmpi-dev)")

# No SYCL toolchain is supported yet: the xpu slot reports "not built".
set(BRAID_HAVE_XPU 0)

function(braid_report_configuration)
  message(STATUS "braid ${PROJECT_VERSION} configuration:")
  foreach(c CUDA HIP NCCL UCX MPI)
    message(STATUS "  BRAID_WITH_${c}: ${BRAID_STATUS_${c}}")
  endforeach()
  if(BRAID_FUZZ)
    message(STATUS "  build type: ${CMAKE_BUILD_TYPE}; fuzzing: libFuzzer targets, every source "
                   "with fuzzer-no-link,address,undefined (cmake/BraidFuzz.cmake)")
  else()
    message(STATUS "  build type: ${CMAKE_BUILD_TYPE}; sanitizers: ${BRAID_SANITIZE}")
  endif()
endfunction()
