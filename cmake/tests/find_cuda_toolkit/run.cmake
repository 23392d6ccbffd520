# ctest core.find_cuda_toolkit (cmake -P): braid_find_cuda_toolkit() must find CUDA with the
# stock, unpatched FindCUDAToolkit.cmake of the CMake running it, where a plain find_package
# fails on toolkits without libnvToolsExt (CUDA >= 12.9): cmake/BraidFindCUDAToolkit.cmake
# says why.
#
# The stock module is not stored here: it is the running CMake's own module with the one-line
# local fix some machines carry taken back out. For CMake 3.25.1 the result is checked against
# the MD5 of the module in Debian 12's cmake-data 3.25.1-1, so the test knows it runs against
# the unpatched text.
#
# -D inputs: BRAID_CMAKE_DIR, CUDA_ROOT (the toolkit braid found), WORK_DIR, GENERATOR.
foreach(v BRAID_CMAKE_DIR CUDA_ROOT WORK_DIR GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run.cmake needs -D${v}=...")
  endif()
endforeach()

set(stock_guard "if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)\n      set_property(TARGET CUDA::nvToolsExt")
set(local_fix "if(TARGET CUDA::nvToolsExt AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)\n      set_property(TARGET CUDA::nvToolsExt")
set(stock_md5_3_25_1 d56241ef6df9e57d0976625ed0e640b0)  # cmake-data_3.25.1-1_all.deb

file(READ "${CMAKE_ROOT}/Modules/FindCUDAToolkit.cmake" module)
string(REPLACE "${local_fix}" "${stock_guard}" module "${module}")
file(REMOVE_RECURSE "${WORK_DIR}")
file(WRITE "${WORK_DIR}/modules/FindCUDAToolkit.cmake" "${module}")
# It includes these beside itself (${CMAKE_CURRENT_LIST_DIR}).
file(COPY "${CMAKE_ROOT}/Modules/FindPackageHandleStandardArgs.cmake"
          "${CMAKE_ROOT}/Modules/FindPackageMessage.cmake" DESTINATION "${WORK_DIR}/modules")
string(MD5 md5 "${module}")
if(CMAKE_VERSION VERSION_EQUAL 3.25.1 AND NOT md5 STREQUAL stock_md5_3_25_1)
  message(FATAL_ERROR "${CMAKE_ROOT}/Modules/FindCUDAToolkit.cmake, with the known local fix "
                      "taken out, is not the stock 3.25.1 module (MD5 ${md5}, expected "
                      "${stock_md5_3_25_1}); it has other changes this test does not know")
endif()
string(FIND "${module}" "${stock_guard}" at)
set(module_has_bug FALSE)
if(at GREATER -1)
  set(module_has_bug TRUE)
endif()
file(GLOB nvtoolsext "${CUDA_ROOT}/lib64/libnvToolsExt*" "${CUDA_ROOT}/lib/libnvToolsExt*")

function(configure_test name use_braid result_var output_var)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}" -B "${WORK_DIR}/${name}"
            -G "${GENERATOR}" "-DMODULE_DIR=${WORK_DIR}/modules" "-DBRAID_CMAKE_DIR=${BRAID_CMAKE_DIR}"
            "-DCUDAToolkit_ROOT=${CUDA_ROOT}" -DUSE_BRAID=${use_braid}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${result_var} "${rc}" PARENT_SCOPE)
  set(${output_var} "${out}${err}" PARENT_SCOPE)
endfunction()

configure_test(braid ON rc out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "braid_find_cuda_toolkit() failed with the stock module:\n${out}")
endif()
string(REGEX MATCH "braid-test: [^\n]*" found "${out}")
message(STATUS "${found}")

# The control: the same search without braid's workaround must fail, else the module above
# was not the one that has the bug, and the first run proved nothing.
if(module_has_bug AND NOT nvtoolsext)
  configure_test(plain OFF rc out)
  if(rc EQUAL 0)
    message(FATAL_ERROR "a plain find_package(CUDAToolkit) succeeded with the stock module; "
                        "expected the nvToolsExt failure this test guards against:\n${out}")
  endif()
  if(NOT out MATCHES "CUDA::nvToolsExt")
    message(FATAL_ERROR "a plain find_package(CUDAToolkit) failed, but not on CUDA::nvToolsExt:\n${out}")
  endif()
  message(STATUS "control: the plain find_package fails on CUDA::nvToolsExt, as expected")
else()
  message(STATUS "control skipped: this CMake's module has no unguarded nvToolsExt line "
                 "(${module_has_bug}) or the toolkit has libnvToolsExt (${nvtoolsext})")
endif()
