# Installs the build into PREFIX and imports posenc and posenc.torch from PREFIX/PACKAGE_DIR with
# PYTHON, from PREFIX so that the build tree is not on the path, checking that the installed copy
# is the one imported.
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${PREFIX}
  RESULT_VARIABLE result OUTPUT_QUIET)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cmake --install failed")
endif()
set(script "import posenc, posenc.torch, numpy as np
assert posenc.__file__.startswith('${PREFIX}/'), posenc.__file__
table = posenc.sinusoidal_table(2, 2)
assert table[0, 1] == 1.0, table
print('imported', posenc.__file__)")
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${PREFIX}/${PACKAGE_DIR}
  ${PYTHON} -c "${script}" WORKING_DIRECTORY ${PREFIX}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "importing the installed package failed:\n${out}\n${err}")
endif()
message(STATUS "${out}")
