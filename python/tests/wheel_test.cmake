# pip's route to posenc (pyproject.toml), from the source tree SOURCE_DIR: `pip wheel` builds the
# wheel, `pip install` puts it into a fresh virtual environment, and there posenc and posenc.torch
# are imported from site-packages and rotate a vector by RoPE, checked against the rotation
# written out by hand.
#
# PYTHON is the project's virtual environment (scripts/venv.sh). The wheel is built by its pip
# with --no-build-isolation, so that the pinned scikit-build-core of python/requirements.txt is
# the backend and nothing is downloaded; pip's isolated build differs only in fetching that same
# backend first. The fresh environment is Debian's python3 with its own site-packages, where the
# wheel goes; a .pth file appends the project environment's site-packages to its path, which
# brings numpy and torch without a second 5.6 GB install and cannot shadow posenc (appended last).
# LAUNCHER: the compiler launcher of the surrounding build (ccache), if any.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run what)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run("the build backend scikit_build_core in ${PYTHON} (python/requirements.txt)"
  ${PYTHON} -c "import scikit_build_core")

cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
set(build_env CMAKE_BUILD_PARALLEL_LEVEL=${cores})
if(LAUNCHER)
  list(APPEND build_env CMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
run("pip wheel" ${CMAKE_COMMAND} -E env ${build_env}
  ${PYTHON} -m pip wheel --no-build-isolation --no-deps --no-index --disable-pip-version-check
    --wheel-dir ${WORK_DIR}/dist --config-settings=build-dir=${WORK_DIR}/build ${SOURCE_DIR})
file(GLOB wheels ${WORK_DIR}/dist/posenc-${VERSION}-*.whl)
list(LENGTH wheels count)
if(NOT count EQUAL 1)
  file(GLOB built ${WORK_DIR}/dist/*)
  message(FATAL_ERROR "expected one wheel posenc-${VERSION}-*.whl, found: ${built}")
endif()

set(venv ${WORK_DIR}/venv)
run("python3 -m venv" /usr/bin/python3 -m venv ${venv})
run("the project environment's site-packages" ${PYTHON} -c
  "print(__import__('sysconfig').get_paths()['purelib'], end='')")
set(project_site "${out}")
run("the fresh environment's site-packages" ${venv}/bin/python -c
  "print(__import__('sysconfig').get_paths()['purelib'], end='')")
set(site "${out}")
if(NOT IS_DIRECTORY "${project_site}" OR NOT IS_DIRECTORY "${site}")
  message(FATAL_ERROR "site-packages not found: '${project_site}', '${site}'")
endif()
file(WRITE ${site}/posenc_project_environment.pth "${project_site}\n")
# --no-deps: numpy, the wheel's one dependency, comes through the .pth file, which pip's resolver
# does not count as installed; --no-index: nothing is downloaded.
run("pip install ${wheels}" ${venv}/bin/python -m pip install --no-deps --no-index
  --disable-pip-version-check ${wheels})

# -I: no PYTHONPATH, no current folder on the path; site-packages only.
set(script "import math, torch
import posenc, posenc.torch as pt
site = '${site}/'
for module in (posenc, posenc._core, pt):
    assert module.__file__.startswith(site), module.__file__
assert posenc.__version__ == '${VERSION}', posenc.__version__
# RoPE of head_dim 4, base 10000, half-split pairs (x0, x2) and (x1, x3) turned by
# pos * 10000^(-2i/4): angles 5 and 0.05 at position 5.
x = [1.0, 2.0, 3.0, 4.0]
q = torch.tensor(x).reshape(1, 1, 4)  # [tokens, heads, head_dim]
got = pt.apply_rope(posenc.Rope.default(4), torch.tensor([5]), q, qkv_format='bshd').reshape(4).tolist()
want = [0.0] * 4
for i, angle in enumerate((5.0, 0.05)):
    c, s = math.cos(angle), math.sin(angle)
    want[i], want[i + 2] = x[i] * c - x[i + 2] * s, x[i + 2] * c + x[i] * s
assert all(abs(g - w) < 1e-5 for g, w in zip(got, want)), (got, want)
print('posenc', posenc.__version__, 'from', posenc.__file__, 'with torch', torch.__version__)")
run("importing and running the installed wheel" ${venv}/bin/python -I -c "${script}")
message(STATUS "${out}")
