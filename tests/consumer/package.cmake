# Builds the .deb from BINARY_DIR with cpack into a scratch folder and checks what apt would see:
# its name and version, the Depends a consumer of the static library needs, the Recommends, the
# files (library, headers, CMake package, pkg-config file, CLI; no Python module) and that the
# packed posenc.pc names /usr. Installing it is left to the user (`apt install ./posenc_*.deb`):
# here its files are unpacked into a folder and consumer.cc is built against them through CMake
# (the package is relocatable) and pkg-config (prefix redefined to the folder), and run.
# cmake -DSOURCE_DIR=... -DBINARY_DIR=... -DWORK_DIR=... -DVERSION=0.1.0 -DLIBDIR=lib
#       -DCPACK=cpack -DCXX=g++ -DPKG_CONFIG=pkg-config -P package.cmake
set(scratch ${WORK_DIR}/package-test)
file(REMOVE_RECURSE ${scratch})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

function(expect what text needle)
  string(FIND "${text}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what} lacks \"${needle}\":\n${text}")
  endif()
endfunction()

run(${CPACK} -G DEB --config ${BINARY_DIR}/CPackConfig.cmake -B ${scratch})
file(GLOB debs ${scratch}/posenc_${VERSION}_*.deb)
list(LENGTH debs count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "expected one posenc_${VERSION}_<arch>.deb in ${scratch}, found: ${debs}")
endif()

run(dpkg-deb --info ${debs})
set(control "${last_output}")
message(STATUS "${control}")
expect("the control file" "${control}" "Package: posenc\n")
expect("the control file" "${control}" "Version: ${VERSION}\n")
# The -dev packages for consumers; the shared libraries the CLI loads (from dpkg-shlibdeps).
foreach(package libhwy-dev libsleef-dev libhwy1 libsleef3 libgomp1)
  expect("Depends" "${control}" "${package}")
endforeach()
expect("the control file" "${control}" "Recommends: gnuplot-nox, libjs-chart.js, pkgconf")

run(dpkg-deb --contents ${debs})
set(contents "${last_output}")
foreach(file bin/posenc ${LIBDIR}/libposenc.a include/posenc/rope.h
    ${LIBDIR}/cmake/posenc/posencConfig.cmake ${LIBDIR}/cmake/posenc/posencTargets.cmake
    ${LIBDIR}/pkgconfig/posenc.pc)
  expect("the package" "${contents}" " ./usr/${file}\n")
endforeach()
if(contents MATCHES "python|dist-packages")
  message(FATAL_ERROR "the package holds the Python module:\n${contents}")
endif()

run(dpkg-deb --extract ${debs} ${scratch}/root)
file(READ ${scratch}/root/usr/${LIBDIR}/pkgconfig/posenc.pc pc)
expect("the packed posenc.pc" "${pc}" "prefix=/usr\n")

set(usr ${scratch}/root/usr)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${scratch}/build -DCMAKE_PREFIX_PATH=${usr}
    -Dposenc_DIR=${usr}/${LIBDIR}/cmake/posenc -DPOSENC_EXAMPLE=${SOURCE_DIR}/examples/quickstart.cc)
run(${CMAKE_COMMAND} --build ${scratch}/build --target consumer)
run(${scratch}/build/consumer)
message(STATUS "find_package consumer of the package:\n${last_output}")
set(ENV{PKG_CONFIG_PATH} ${usr}/${LIBDIR}/pkgconfig)
run(${PKG_CONFIG} --define-variable=prefix=${usr} --cflags --libs posenc)
separate_arguments(flags UNIX_COMMAND "${last_output}")
run(${CXX} ${SOURCE_DIR}/tests/consumer/consumer.cc ${flags} -o ${scratch}/consumer_pkg_config)
run(${scratch}/consumer_pkg_config)
message(STATUS "pkg-config consumer of the package:\n${last_output}")
