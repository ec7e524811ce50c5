"""The `normgate` command of an installed package (pyproject.toml,
[project.scripts]): runs the CLI installed inside the package,
<package>/bin/normgate, in place of this process (execv: the same
arguments, exit code, signals and stdio). In a source tree the CLI is
build/apps/normgate."""

import os
import sys


def binary_path():
    """Where `pip install .` puts the CLI: bin/normgate inside the package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "normgate")


def main():
    exe = binary_path()
    if not os.access(exe, os.X_OK):
        sys.stderr.write("normgate: no CLI at %s: this normgate package was not installed by `pip install .` "
                         "(in a source tree the CLI is build/apps/normgate)\n" % exe)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(exe, [sys.argv[0]] + sys.argv[1:])
    except OSError as e:  # execv returns only by failing
        sys.stderr.write("normgate: cannot run %s: %s\n" % (exe, e))
    return 3


if __name__ == "__main__":
    sys.exit(main())
