# BRAID_SANITIZE: a comma-separated list passed to -fsanitize= (e.g. "address,undefined", or
# "thread" for comm/). Applies to C and C++ only: nvcc does not take -fsanitize, so CUDA
# sources build unsanitized (scripts/test.sh turns the GPU components off in its ASan build).
# Any sanitizer error stops the process (-fno-sanitize-recover), so a test fails on it.
set(BRAID_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined")
if(BRAID_SANITIZE)
  if(NOT BRAID_SANITIZE MATCHES "^(address|undefined|thread|leak)(,(address|undefined|thread|leak))*$")
    message(FATAL_ERROR "BRAID_SANITIZE=${BRAID_SANITIZE}: expected a comma-separated list of "
      "address, undefined, thread, leak")
  endif()
  if(BRAID_SANITIZE MATCHES "thread" AND BRAID_SANITIZE MATCHES "address")
    message(FATAL_ERROR "BRAID_SANITIZE=${BRAID_SANITIZE}: thread and address cannot be combined")
  endif()
  set(_braid_san_flags -fsanitize=${BRAID_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  # With the instrumentation (and -O1) GCC 12 reports "may be used uninitialized" on code the
  # Release build compiles without it: libstdc++'s std::regex compiler, temporaries of
  # initializer lists. Those are false positives; the Release build keeps the warning.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND _braid_san_flags -Wno-maybe-uninitialized)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_braid_san_flags}>")
  add_link_options(-fsanitize=${BRAID_SANITIZE})
endif()
