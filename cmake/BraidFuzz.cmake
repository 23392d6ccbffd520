# BRAID_FUZZ: builds the libFuzzer targets of tests/fuzz/ (docs/fuzzing.md), one per parser.
# Clang 15 or newer only: libFuzzer is clang's, and braid's errors use std::source_location,
# which libstdc++ implements with a builtin clang 14 lacks (Debian 12: clang-15, and
# libclang-common-15-dev for libFuzzer's runtime). Every C and C++ source
# of the build is compiled with -fsanitize=fuzzer-no-link,address,undefined, so the libraries'
# code feeds the fuzzer's coverage and any memory or undefined-behaviour error stops the run;
# only the fuzz executables link -fsanitize=fuzzer (libFuzzer's main).
# Configure it on its own build folder with the GPU components off (nvcc takes no -fsanitize),
# as scripts/test.sh does, and build the target braid_fuzz.
option(BRAID_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only)" OFF)
if(NOT BRAID_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "BRAID_FUZZ=ON needs clang, for libFuzzer; this build's compilers are "
    "${CMAKE_C_COMPILER_ID} / ${CMAKE_CXX_COMPILER_ID}. Configure a new build folder with "
    "-DCMAKE_C_COMPILER=clang-15 -DCMAKE_CXX_COMPILER=clang++-15 (Debian: apt-get install "
    "clang-15 libclang-common-15-dev)")
endif()
if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 15)
  message(FATAL_ERROR "BRAID_FUZZ=ON needs clang 15 or newer (this is clang "
    "${CMAKE_CXX_COMPILER_VERSION}): clang 14 cannot compile libstdc++'s std::source_location, "
    "which braid's errors use. Configure with -DCMAKE_C_COMPILER=clang-15 "
    "-DCMAKE_CXX_COMPILER=clang++-15 (Debian: apt-get install clang-15 libclang-common-15-dev)")
endif()
if(BRAID_SANITIZE)
  message(FATAL_ERROR "BRAID_FUZZ=ON sets its own sanitizers (address,undefined): leave "
    "BRAID_SANITIZE empty (it is '${BRAID_SANITIZE}')")
endif()

# libFuzzer's runtime is a separate Debian package from the compiler: say so at configure time
# rather than as a link error at the end of the build.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS -fsanitize=fuzzer)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer)
check_cxx_source_compiles([[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
]] BRAID_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(NOT BRAID_HAVE_LIBFUZZER)
  message(FATAL_ERROR "BRAID_FUZZ=ON: ${CMAKE_CXX_COMPILER} cannot link -fsanitize=fuzzer "
    "(libclang_rt.fuzzer missing? Debian: apt-get install libclang-common-15-dev)")
endif()

set(_braid_fuzz_flags -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_braid_fuzz_flags}>")
add_link_options(-fsanitize=address,undefined)
