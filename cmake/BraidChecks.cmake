# Source checks that run with every build and as ctest tests.
#
# braid_check_layering (part of ALL, and every braid library depends on it): fails the build
# when a file includes a layer above its own (cmake/check_layering.py, docs/layout.md).
# ctest: "layering" runs the same check; "layering_catches_violation" proves the checker
# fails on temporary trees with forbidden includes; "spdx" checks the licence lines
# (cmake/check_spdx.py).
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(WARNING "python3 not found: the layering check is skipped (apt-get install python3)")
  return()
endif()

add_custom_target(braid_check_layering ALL
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/check_layering.py ${PROJECT_SOURCE_DIR}
  COMMENT "Checking the layering of braid's folders"
  VERBATIM)

if(BRAID_BUILD_TESTS)
  add_test(NAME layering
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/check_layering.py ${PROJECT_SOURCE_DIR})
  add_test(NAME layering_catches_violation
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/check_layering_test.py)
  set_tests_properties(layering layering_catches_violation PROPERTIES LABELS "layering")
  # The licence policy (docs/layout.md, "Licence"): installed files carry an SPDX line.
  add_test(NAME spdx COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/check_spdx.py
                             ${PROJECT_SOURCE_DIR})
  set_tests_properties(spdx PROPERTIES LABELS "layering")
endif()
