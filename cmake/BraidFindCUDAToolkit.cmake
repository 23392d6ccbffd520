# braid_find_cuda_toolkit(): find_package(CUDAToolkit QUIET), made to work with CUDA >= 12.9 on
# CMake releases whose FindCUDAToolkit predates it (Debian 12's 3.25 among them).
#
# Why: CUDA 12.9 dropped libnvToolsExt (NVTX is the header-only nvtx3 now), so the module
# creates no CUDA::nvToolsExt target; but up to CMake 4.0 it then runs, for any CUDA >= 10,
#
#   if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)
#     set_property(TARGET CUDA::nvToolsExt PROPERTY DEPRECATION "...")
#   endif()
#
# and set_property on a missing target is a hard configure error (not "not found"), in every
# project whose cmake_minimum_required is 3.25 or more, as braid's is. Newer CMake (4.1's module
# has it) guards the line with `if(TARGET CUDA::nvToolsExt AND ...)`, which is also the local
# patch some machines carry (this project's build machines among them). The
# condition only decides whether to attach a deprecation warning to CUDA::nvToolsExt, which
# braid never links, so the search runs with the variable lowered to 3.24 and restored after:
# the module then skips the line, and every result it gives is the same. (Shipping a fixed
# copy of the 1100-line module would work too, but would also freeze every other fix newer
# CMake releases make to it.)
#
# Tested against the unpatched 3.25.1 module by the ctest core.find_cuda_toolkit
# (cmake/tests/find_cuda_toolkit/).
macro(braid_find_cuda_toolkit)
  set(_braid_saved_minimum_required "${CMAKE_MINIMUM_REQUIRED_VERSION}")
  if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  endif()
  find_package(CUDAToolkit QUIET ${ARGN})
  set(CMAKE_MINIMUM_REQUIRED_VERSION "${_braid_saved_minimum_required}")
  unset(_braid_saved_minimum_required)
endmacro()
