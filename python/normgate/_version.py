"""normgate.__version__ and whether the kernels were built for the GPU.

One source: the CMake project version (CMakeLists.txt, `project(normgate
VERSION X.Y.Z ...)`), which pyproject.toml also reads for the package metadata.
  - installed (`pip install .`): the wheel build writes _build_info.py beside
    this file (cmake/install.cmake) with the version and the CUDA flag;
  - in a source tree (python/ on sys.path): read from the repository's
    CMakeLists.txt two folders up ("0+unknown" if there is none); the CUDA
    flag is then unknown (None): the library itself says (device_available(),
    kernel calls).
The C library reports its own version (normgate.version(), "normgate X.Y.Z
(commit)"); _lib.py refuses a library older than the ctypes declarations.
"""

import os
import re

_PROJECT_RE = re.compile(r"project\(\s*normgate\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)")


def _from_source_tree():
    """The version in ../../CMakeLists.txt, or "0+unknown" when this package
    is neither installed nor in a source tree (importing never fails)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.normpath(os.path.join(here, "..", "..", "CMakeLists.txt"))
    try:
        with open(path, encoding="utf-8") as f:
            m = _PROJECT_RE.search(f.read())
    except OSError:
        m = None
    return m.group(1) if m else "0+unknown"


try:
    from ._build_info import cuda as built_with_cuda
    from ._build_info import version as __version__
    installed = True
except ImportError:
    __version__ = _from_source_tree()
    built_with_cuda = None
    installed = False
