# Helpers shared by every folder's CMakeLists.txt.

set(BRAID_WARNINGS -Wall -Wextra -Wno-unused-parameter)
# nvcc rejects -W flags it does not know: CUDA sources pass them to the host compiler instead.
list(JOIN BRAID_WARNINGS "," _braid_host_warnings)
set(BRAID_CUDA_WARNINGS -Xcompiler=${_braid_host_warnings})

# braid_add_library(<folder> SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
# Creates target braid_<folder> (alias braid::<folder>) with public headers in
# <folder>/include/braid/<folder>/ and installs it.
function(braid_add_library folder)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(t braid_${folder})
  add_library(${t} ${ARG_SOURCES})
  add_library(braid::${folder} ALIAS ${t})
  target_include_directories(${t} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_options(${t} PRIVATE "$<$<COMPILE_LANGUAGE:C,CXX>:${BRAID_WARNINGS}>"
                                      "$<$<COMPILE_LANGUAGE:CUDA>:${BRAID_CUDA_WARNINGS}>")
  target_compile_features(${t} PUBLIC cxx_std_20)
  target_link_libraries(${t} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${folder})
  if(TARGET braid_check_layering)
    add_dependencies(${t} braid_check_layering)  # a layering error stops the build first
  endif()
  # Bottom to top: BraidInstall.cmake and the braid::braid umbrella read this order.
  set_property(GLOBAL APPEND PROPERTY BRAID_LAYER_LIBRARIES ${t})
  install(TARGETS ${t} EXPORT braidTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

# braid_add_test(<name> SOURCES ... [DEPS ...] [LABELS ...])
# A GoogleTest binary whose cases are registered with ctest one by one.
function(braid_add_test name)
  if(NOT BRAID_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_SOURCES)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${BRAID_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)
  target_compile_definitions(${name} PRIVATE
    BRAID_SOURCE_DIR="${PROJECT_SOURCE_DIR}" BRAID_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set(labels unit ${ARG_LABELS})
  # gtest_discover_tests flattens a list in PROPERTIES, so "unit;comm" would lose "comm".
  # Instead, a file ctest includes after discovery labels every test the binary listed.
  gtest_discover_tests(${name} TEST_LIST ${name}_TESTS DISCOVERY_TIMEOUT 60)
  set(label_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(WRITE ${label_file}
    "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${labels}\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${label_file})
endfunction()
