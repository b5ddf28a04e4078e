# Installs posenc from BINARY_DIR into a scratch prefix, builds tests/consumer against it with
# find_package(posenc), and runs the README's example. Fails on any step.
set(scratch ${WORK_DIR}/consumer-test)
file(REMOVE_RECURSE ${scratch})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${scratch}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${scratch}/build
    -DCMAKE_PREFIX_PATH=${scratch}/prefix -DPOSENC_EXAMPLE=${SOURCE_DIR}/examples/quickstart.cc)
run(${CMAKE_COMMAND} --build ${scratch}/build)
run(${scratch}/build/quickstart)
message(STATUS "${last_output}")
if(NOT last_output MATCHES "score\\(5, 2\\) = (-?[0-9.]+), score\\(1005, 1002\\) = (-?[0-9.]+)")
  message(FATAL_ERROR "unexpected output: ${last_output}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2)
  message(FATAL_ERROR "the example's scores differ: ${CMAKE_MATCH_1} vs ${CMAKE_MATCH_2}")
endif()
if(NOT EXISTS ${scratch}/prefix/bin/posenc)
  message(FATAL_ERROR "the posenc CLI was not installed")
endif()
