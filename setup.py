"""`pip install .`: the Python module meshlayout, built by CMake.

The package is python/meshlayout/ (pure Python, the type stubs and py.typed) plus the extension
meshlayout._meshlayout, which CMake builds (-DMESHLAYOUT_PYTHON=ON, target meshlayout_python):

    pip install --no-build-isolation --no-index .      # Debian's setuptools and wheel, offline

configures build-pip/cmake (Release, no tests or benchmarks, the running interpreter's Python)
and builds the module there, then copies it and the package into the wheel. Environment:

    MESHLAYOUT_PREBUILT=/path/to/build   reuse a CMake build that already has the module
                                         (<build>/python/meshlayout/_meshlayout*.so, built for
                                         this interpreter) instead of building one; a
                                         relative path is taken from the repository root
                                         (pip runs setup.py there)
    MESHLAYOUT_CMAKE_ARGS="-D…"          extra arguments for the CMake configure step
    CMAKE_BUILD_PARALLEL_LEVEL=N         build jobs (default: the CPUs this process may use)
"""

import glob
import importlib.machinery
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def cmake_project_version():
    """The version in CMakeLists.txt's project(meshlayout VERSION x.y.z): one number for both."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(meshlayout\s+VERSION\s+([0-9.]+)", f.read())
    if not match:
        raise RuntimeError("setup.py: no 'project(meshlayout VERSION x.y.z)' in CMakeLists.txt")
    return match.group(1)


def built_module(build_dir):
    """The extension in a CMake build folder, checked against this interpreter's ABI."""
    pattern = os.path.join(build_dir, "python", "meshlayout", "_meshlayout*.so")
    found = sorted(glob.glob(pattern))
    if not found:
        raise RuntimeError(
            f"setup.py: no module {pattern}: build it there first "
            f"(cmake -DMESHLAYOUT_PYTHON=ON, target meshlayout_python)")
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    for path in found:
        if any(path.endswith("_meshlayout" + s) for s in suffixes):
            return path
    raise RuntimeError(
        f"setup.py: {', '.join(found)} was built for another Python; this interpreter "
        f"({sys.executable}) loads _meshlayout with a suffix among {suffixes}")


class CMakeBuild(build_ext):
    """Builds _meshlayout with CMake (or takes MESHLAYOUT_PREBUILT's) and puts it in place."""

    def build_extension(self, ext):
        prebuilt = os.environ.get("MESHLAYOUT_PREBUILT")
        if prebuilt:
            source = built_module(os.path.abspath(prebuilt))
            print(f"setup.py: MESHLAYOUT_PREBUILT: using {source}")
        else:
            source = self.cmake_build()
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(source, target)

    def cmake_build(self):
        build_dir = os.path.join(ROOT, "build-pip", "cmake")
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DMESHLAYOUT_PYTHON=ON",
            "-DMESHLAYOUT_BUILD_TESTS=OFF",
            "-DMESHLAYOUT_BUILD_BENCHMARKS=OFF",
            f"-DPython_EXECUTABLE={sys.executable}",
        ]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("MESHLAYOUT_CMAKE_ARGS", ""))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(len(os.sched_getaffinity(0)))
        build = ["cmake", "--build", build_dir, "--target", "meshlayout_python", "-j", jobs]
        for command in (configure, build):
            print("setup.py:", shlex.join(command), flush=True)
            subprocess.run(command, check=True)
        return built_module(build_dir)


# setuptools never removes what an earlier build left in its build folder, and a wheel takes
# everything there: start from an empty one, so a file deleted from python/meshlayout is not
# shipped from a previous build.
shutil.rmtree(os.path.join(ROOT, "build-pip", "setuptools"), ignore_errors=True)

setup(
    version=cmake_project_version(),
    packages=["meshlayout"],
    package_dir={"": "python"},
    package_data={"meshlayout": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("meshlayout._meshlayout", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own build folders go beside CMake's, not into the developers' build/.
    options={"build": {"build_base": "build-pip/setuptools"}},
    zip_safe=False,
)
