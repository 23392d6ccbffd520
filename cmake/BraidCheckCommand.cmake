# Runs one command and checks its exit status and output; used by ctest for command-line
# tests (apps/, examples/) where PASS_REGULAR_EXPRESSION alone cannot check both.
#
#   cmake -DCOMMAND="prog;arg1;arg2" [-DEXPECT_EXIT=0|nonzero] [-DEXPECT_OUTPUT=<regex>]
#         [-DREJECT_OUTPUT=<regex>] -P BraidCheckCommand.cmake
# EXPECT_EXIT defaults to 0. Output is stdout and stderr together.
if(NOT DEFINED COMMAND)
  message(FATAL_ERROR "BraidCheckCommand: COMMAND is not set")
endif()
if(NOT DEFINED EXPECT_EXIT)
  set(EXPECT_EXIT 0)
endif()

execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out
  TIMEOUT 120)
message("$ ${COMMAND}\n${out}(exit: ${rc})")

if(EXPECT_EXIT STREQUAL "nonzero")
  if(rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "expected a non-zero exit status, got '${rc}'")
  endif()
elseif(NOT rc STREQUAL EXPECT_EXIT)
  message(FATAL_ERROR "expected exit status ${EXPECT_EXIT}, got '${rc}'")
endif()
if(DEFINED EXPECT_OUTPUT AND NOT out MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match the expected pattern '${EXPECT_OUTPUT}'")
endif()
if(DEFINED REJECT_OUTPUT AND out MATCHES "${REJECT_OUTPUT}")
  message(FATAL_ERROR "output matches the rejected pattern '${REJECT_OUTPUT}'")
endif()
