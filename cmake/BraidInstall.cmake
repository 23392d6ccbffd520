# Installs the CMake package (find_package(braid) -> braid::braid) and a pkg-config file.
# Libraries, headers and the braid CLI install themselves (BraidHelpers.cmake, apps/).
# tests/install/ checks the result from a project outside the tree.
include(CMakePackageConfigHelpers)
set(BRAID_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/braid)
install(EXPORT braidTargets NAMESPACE braid:: DESTINATION ${BRAID_CMAKE_DIR})
# The optional parts (braid_add_component) without their "braid_" prefix, for the config.
get_property(_braid_components GLOBAL PROPERTY BRAID_COMPONENT_LIBRARIES)
list(TRANSFORM _braid_components REPLACE "^braid_" "")
set(BRAID_COMPONENT_NAMES "${_braid_components}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/braidConfig.cmake.in
  ${PROJECT_BINARY_DIR}/braidConfig.cmake INSTALL_DESTINATION ${BRAID_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/braidConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/braidConfig.cmake ${PROJECT_BINARY_DIR}/braidConfigVersion.cmake
  DESTINATION ${BRAID_CMAKE_DIR})
# The generated braid/core/config.h.
install(DIRECTORY ${PROJECT_BINARY_DIR}/generated/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# pkg-config. Static archives must be listed top layer first, so reverse the order in
# which braid_add_library created them (bottom to top). The prefix is found from the .pc
# file's own place, so `cmake --install --prefix` anywhere gives a working file.
# A component is named by its archive's file (-l:libbraid_comm_mpi.a): -lbraid_comm_mpi would
# find its plugin libbraid_comm_mpi.so first, in the same folder (docs/layout.md, "Components").
get_property(_braid_libs GLOBAL PROPERTY BRAID_LAYER_LIBRARIES)
get_property(_braid_component_libs GLOBAL PROPERTY BRAID_COMPONENT_LIBRARIES)
list(REVERSE _braid_libs)
set(_braid_pc_words)
foreach(_lib IN LISTS _braid_libs)
  if(_lib IN_LIST _braid_component_libs)
    list(APPEND _braid_pc_words "-l:lib${_lib}.a")
  else()
    list(APPEND _braid_pc_words "-l${_lib}")
  endif()
endforeach()
list(JOIN _braid_pc_words " " BRAID_PC_LIBS)
if(BRAID_HAVE_MPI)  # braid_comm_mpi links MPI privately (the mpi backend)
  list(JOIN MPI_CXX_LIBRARIES " " _braid_mpi_libs)
  string(APPEND BRAID_PC_LIBS " ${_braid_mpi_libs}")
endif()
if(BRAID_HAVE_UCX)  # braid_comm_ucx links UCX privately (the ucx backend)
  list(JOIN UCX_LDFLAGS " " _braid_ucx_libs)
  string(APPEND BRAID_PC_LIBS " ${_braid_ucx_libs}")
endif()
if(BRAID_HAVE_NCCL)  # braid_comm_nccl links libnccl privately
  string(APPEND BRAID_PC_LIBS " ${BRAID_NCCL_LIBRARY}")
endif()
# Each component's entry point, so the linker pulls it out of its archive (braid_add_component).
get_property(_braid_entries GLOBAL PROPERTY BRAID_COMPONENT_ENTRIES)
foreach(_entry IN LISTS _braid_entries)
  string(APPEND BRAID_PC_LIBS " -Wl,--undefined=${_entry}")
endforeach()
if(TARGET braid_accel)  # braid_accel links yaml-cpp privately (configuration files)
  string(APPEND BRAID_PC_LIBS " -lyaml-cpp")
endif()
if(BRAID_HAVE_CUDA)  # braid_kernels_cuda / core_cuda link cuBLASLt and cudart privately
  string(APPEND BRAID_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcublasLt -lcudart")
endif()
file(RELATIVE_PATH BRAID_PC_TO_PREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" BRAID_PC_TO_PREFIX "${BRAID_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/braid.pc.in ${PROJECT_BINARY_DIR}/braid.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/braid.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
