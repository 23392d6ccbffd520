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

# braid_short_memsets(<target>): GCC on x86-64 zeroes a short struct (100-250 bytes: a
# CollectiveDesc, the shm backend's Call) with `rep stos`, whose start-up cost was 8-10% of a
# 16-byte collective on a Zen 4 (docs/performance.md, "Per-call cost"); vector stores up to 256
# bytes instead, the library call above.
function(braid_short_memsets t)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    target_compile_options(${t} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-mmemset-strategy=vector_loop:256:noalign,libcall:-1:noalign>")
  endif()
endfunction()

# braid_add_component(<name> ENTRY <symbol> SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
# An optional part of a layer that needs an outside library (a transport: MPI, UCX, NCCL; the
# CUDA runtime and kernels): target braid_<name> (alias braid::<name>, exported as
# braid::<name>), so a program that does not link it does not link that library either
# (docs/layout.md, "Components"). The layer finds it through a weak reference to the
# extern "C" function <symbol>, which the component defines; linking the component adds
# --undefined=<symbol>, so the archive member defining it is always pulled in. In this tree
# every executable that does not link libbraid.so gets every component
# (braid_link_components_everywhere), as braid::braid gives a consumer. libbraid.so holds no
# component: bindings/c/CMakeLists.txt makes each one a plugin, libbraid_<name>.so, from the
# same objects, linked to libbraid.so and to the outside libraries in PRIVATE_DEPS (DEPS are
# braid layers, which the plugin takes from libbraid.so).
function(braid_add_component name)
  cmake_parse_arguments(ARG "" "ENTRY" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT ARG_ENTRY)
    message(FATAL_ERROR "braid_add_component(${name}): ENTRY <symbol> is required")
  endif()
  set(t braid_${name})
  add_library(${t} STATIC ${ARG_SOURCES})
  add_library(braid::${name} ALIAS ${t})
  target_compile_options(${t} PRIVATE "$<$<COMPILE_LANGUAGE:C,CXX>:${BRAID_WARNINGS}>"
                                      "$<$<COMPILE_LANGUAGE:CUDA>:${BRAID_CUDA_WARNINGS}>")
  target_compile_features(${t} PUBLIC cxx_std_20)
  target_link_libraries(${t} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_link_options(${t} INTERFACE "LINKER:--undefined=${ARG_ENTRY}")
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${name})
  # For the plugin (bindings/c/CMakeLists.txt): what it links besides libbraid.so.
  set_property(TARGET ${t} PROPERTY BRAID_PLUGIN_LIBRARIES ${ARG_PRIVATE_DEPS})
  set_property(TARGET ${t} PROPERTY BRAID_COMPONENT_ENTRY ${ARG_ENTRY})
  if(TARGET braid_check_layering)
    add_dependencies(${t} braid_check_layering)
  endif()
  set_property(GLOBAL APPEND PROPERTY BRAID_LAYER_LIBRARIES ${t})
  set_property(GLOBAL APPEND PROPERTY BRAID_COMPONENT_LIBRARIES ${t})
  set_property(GLOBAL APPEND PROPERTY BRAID_COMPONENT_ENTRIES ${ARG_ENTRY})
  install(TARGETS ${t} EXPORT braidTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

# Links every component to every executable of the tree under `dir` that does not link
# libbraid.so (which holds them all already): tests, apps, examples and bench run with every
# backend and runtime the build has, as before components were split out.
# Each folder once: when braid is a subproject of bindings/python (`pip install`), that
# folder's path names the enclosing project, whose subdirectory is braid's root again.
function(braid_link_components_everywhere dir)
  get_property(components GLOBAL PROPERTY BRAID_COMPONENT_LIBRARIES)
  get_property(seen GLOBAL PROPERTY BRAID_COMPONENTS_LINKED_DIRS)
  if(NOT components OR dir IN_LIST seen)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY BRAID_COMPONENTS_LINKED_DIRS ${dir})
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    get_target_property(libs ${t} LINK_LIBRARIES)
    if(type STREQUAL "EXECUTABLE" AND NOT "braid_shared" IN_LIST libs)
      target_link_libraries(${t} PRIVATE ${components})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    braid_link_components_everywhere(${sub})
  endforeach()
endfunction()

# braid_add_test(<name> SOURCES ... [DEPS ...] [LABELS ...] [TIMEOUT seconds])
# A GoogleTest binary whose cases are registered with ctest one by one. TIMEOUT sets each
# case's ctest timeout (which ctest's --timeout does not override); without it, --timeout's.
function(braid_add_test name)
  if(NOT BRAID_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
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
  set(properties "LABELS \"${labels}\"")
  if(ARG_TIMEOUT)
    string(APPEND properties " TIMEOUT ${ARG_TIMEOUT}")
  endif()
  set(label_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(WRITE ${label_file}
    "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES ${properties})\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${label_file})
endfunction()
