"""pip install ./python: tensortier.torch with the runtime's shared libraries beside it.

The extension is built by the project's CMake (the repository root, one level up): tests, benches
and the GPU backend off, the package's module and the libraries it loads installed into the
package with an $ORIGIN run path. Needs what the build needs (tools/setup.sh; PyTorch's C++ headers
of the Python that runs pip: libtorch-dev for Debian's, the wheel's own for a PyPI PyTorch).
setuptools drives it because Debian 12 packages no CMake build backend (scikit-build-core).
"""

import os
import pathlib
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent.parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        package_dir = pathlib.Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build = ROOT / "build" / "pip"
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                     "-DTENSORTIER_BUILD_TESTS=OFF", "-DTENSORTIER_BUILD_BENCH=OFF", "-DTENSORTIER_GPU=OFF",
                     "-DTENSORTIER_TORCH=ON", f"-DTENSORTIER_PYTHON={sys.executable}",
                     f"-DTENSORTIER_PYTHON_PACKAGE_DIR={package_dir}", "-DCMAKE_INSTALL_RPATH=$ORIGIN"]
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "tensortier_torch"])
        subprocess.check_call(["cmake", "--install", str(build), "--component", "tensortier_python"])


setup(
    name="tensortier",
    version="0.1.0",
    description="Object-level tiering of DNN training tensors across heterogeneous memory (PyTorch CPU training on tiers)",
    packages=["tensortier"],
    package_dir={"": os.path.relpath(pathlib.Path(__file__).parent)},
    ext_modules=[Extension("tensortier._torch", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
)
