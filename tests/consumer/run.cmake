# Installs posenc from BINARY_DIR into a scratch prefix and builds programs against it as users
# would: through CMake (tests/consumer, find_package(posenc)) and through pkg-config (the
# compiler CXX given `pkg-config --cflags --libs posenc`, nothing else). Runs the README's
# example and consumer.cc, which checks values against their closed forms. Fails on any step.
# cmake -DSOURCE_DIR=... -DBINARY_DIR=... -DWORK_DIR=... -DLIBDIR=lib -DCXX=g++
#       -DPKG_CONFIG=pkg-config -P run.cmake
set(scratch ${WORK_DIR}/consumer-test)
set(prefix ${scratch}/prefix)
file(REMOVE_RECURSE ${scratch})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${prefix})
if(NOT EXISTS ${prefix}/bin/posenc)
  message(FATAL_ERROR "the posenc CLI was not installed")
endif()

# CMake: find_package(posenc) from the prefix.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${scratch}/build
    -DCMAKE_PREFIX_PATH=${prefix} -DPOSENC_EXAMPLE=${SOURCE_DIR}/examples/quickstart.cc)
run(${CMAKE_COMMAND} --build ${scratch}/build)
run(${scratch}/build/quickstart)
message(STATUS "${last_output}")
if(NOT last_output MATCHES "score\\(5, 2\\) = (-?[0-9.]+), score\\(1005, 1002\\) = (-?[0-9.]+)")
  message(FATAL_ERROR "unexpected output: ${last_output}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2)
  message(FATAL_ERROR "the example's scores differ: ${CMAKE_MATCH_1} vs ${CMAKE_MATCH_2}")
endif()
run(${scratch}/build/consumer)
message(STATUS "find_package consumer:\n${last_output}")

# pkg-config: posenc.pc from the prefix (PKG_CONFIG_PATH first, as a user with a non-default
# prefix sets it); Highway's and SLEEF's .pc files from the system.
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
run(${PKG_CONFIG} --modversion posenc)
message(STATUS "pkg-config finds posenc ${last_output}")
run(${PKG_CONFIG} --cflags --libs posenc)
string(STRIP "${last_output}" flags)
message(STATUS "pkg-config --cflags --libs posenc: ${flags}")
string(FIND "${flags}" "-I${prefix}/include" include_at)
string(FIND "${flags}" "-L${prefix}/${LIBDIR}" lib_at)
if(include_at EQUAL -1 OR lib_at EQUAL -1)
  message(FATAL_ERROR "posenc.pc does not point at the prefix ${prefix}: ${flags}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CXX} ${SOURCE_DIR}/tests/consumer/consumer.cc ${flags} -o ${scratch}/consumer_pkg_config)
run(${scratch}/consumer_pkg_config)
message(STATUS "pkg-config consumer:\n${last_output}")
