"""How an installed package differs from the source tree, without building a
wheel (tests/install/pip_test.sh builds one): the package is copied into a
scratch site folder laid out as `pip install .` lays it out (pyproject.toml:
lib/libnormgate_capi.so, _build_info.py, bin/normgate), and imported from
there in a child process.

  - library discovery (_lib.py): the packaged library first, even over
    $NORMGATE_LIB; else $NORMGATE_LIB; else the build folder;
  - __version__ (_version.py): the installed _build_info.py's; in the source
    tree the CMake project version, the one the C library reports;
  - the `normgate` command (_cli.py): runs bin/normgate with the same
    arguments and exit code; without it, exit 2 naming the missing path.

No torch. Runs under pytest, or alone (`python3 python/tests/test_packaging.py`,
as ctest's python_packaging does, with NORMGATE_LIB set to the build's
library); prints "N passed, N failed".
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_PKG = os.path.normpath(os.path.join(HERE, "..", "normgate"))


def _run(site, code, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("NORMGATE_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = site
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=site)
    return r


def _installed_copy(tmp, with_lib=True, with_info=True, cli_script=None):
    """tmp/site/normgate: the package as the wheel installs it."""
    pkg = os.path.join(tmp, "site", "normgate")
    shutil.copytree(SRC_PKG, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    if with_lib:
        os.makedirs(os.path.join(pkg, "lib"))
        built = os.environ.get("NORMGATE_LIB")
        assert built and os.path.isfile(built), "set NORMGATE_LIB to the build's libnormgate_capi.so"
        shutil.copy(built, os.path.join(pkg, "lib", "libnormgate_capi.so"))
    if with_info:
        with open(os.path.join(pkg, "_build_info.py"), "w") as f:
            f.write('version = "9.8.7"\ncuda = True\n')
    if cli_script is not None:
        os.makedirs(os.path.join(pkg, "bin"))
        exe = os.path.join(pkg, "bin", "normgate")
        with open(exe, "w") as f:
            f.write(cli_script)
        os.chmod(exe, 0o755)
    return os.path.dirname(pkg), pkg


def test_packaged_library_wins_over_normgate_lib():
    with tempfile.TemporaryDirectory() as tmp:
        site, pkg = _installed_copy(tmp)
        r = _run(site, "import normgate; print(normgate.library_path()); print(normgate.version())",
                 {"NORMGATE_LIB": "/nonexistent/libnormgate_capi.so"})
        assert r.returncode == 0, r.stderr
        path, ver = r.stdout.splitlines()
        assert path == os.path.join(pkg, "lib", "libnormgate_capi.so"), path
        assert ver.startswith("normgate "), ver


def test_without_packaged_library_normgate_lib_then_build_folder():
    with tempfile.TemporaryDirectory() as tmp:
        site, pkg = _installed_copy(tmp, with_lib=False)
        r = _run(site, "import normgate; print(normgate.library_path())", {"NORMGATE_LIB": "/some/where/lib.so"})
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "/some/where/lib.so", r.stdout
        # Neither: ../../build/capi/ relative to the package, and a RuntimeError naming it on first use.
        r = _run(site, "import normgate; print(normgate.library_path()); normgate.version()")
        want = os.path.join(tmp, "build", "capi", "libnormgate_capi.so")
        assert r.stdout.strip() == want, r.stdout
        assert r.returncode != 0 and "not found at " + want in r.stderr and "pip install ." in r.stderr, r.stderr


def _another_library():
    """The path of a shared library this process has loaded that is not
    normgate's (libc, libm, ...): one ctypes loads, without ng_version."""
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            base = os.path.basename(p)
            if p.startswith("/") and (base.startswith("libc.so") or base.startswith("libm.so")
                                      or base.startswith("libc-") or base.startswith("libm-")) and os.path.isfile(p):
                return p
    return None


def test_normgate_lib_at_another_library_is_a_runtime_error_naming_it():
    other = _another_library()
    assert other, "no libc or libm in /proc/self/maps"
    with tempfile.TemporaryDirectory() as tmp:
        site, _ = _installed_copy(tmp, with_lib=False)
        r = _run(site, "import normgate\n"
                       "try:\n    normgate.version()\n"
                       "except RuntimeError as e:\n    print(e)\n"
                       "else:\n    raise SystemExit('loaded')", {"NORMGATE_LIB": other})
        # ctypes' bare AttributeError ("undefined symbol: ng_version") before.
        assert r.returncode == 0 and "Traceback" not in r.stderr, (r.returncode, r.stdout, r.stderr)
        assert ("normgate: %s is not the normgate C library libnormgate_capi.so (it has no ng_version" % other
                in r.stdout), r.stdout
        assert "set NORMGATE_LIB to the build's capi/libnormgate_capi.so" in r.stdout, r.stdout
        # loadable() (the tests' skip check) says no instead of raising.
        r = _run(site, "import normgate._lib as L; print(L.loadable())", {"NORMGATE_LIB": other})
        assert r.returncode == 0 and r.stdout.strip() == "False", (r.stdout, r.stderr)


def test_version_installed_and_source_tree():
    with tempfile.TemporaryDirectory() as tmp:
        site, _ = _installed_copy(tmp, with_lib=False)
        r = _run(site, "import normgate; from normgate import _version as v; "
                       "print(normgate.__version__, v.installed, v.built_with_cuda)")
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["9.8.7", "True", "True"], r.stdout
    # Source tree: CMakeLists.txt's project version, which the C library reports too.
    src_site = os.path.dirname(SRC_PKG)
    r = _run(src_site, "import normgate; from normgate import _version as v; "
                       "print(normgate.__version__, v.installed, v.built_with_cuda); print(normgate.version())",
             {"NORMGATE_LIB": os.environ.get("NORMGATE_LIB", "")})
    assert r.returncode == 0, r.stderr
    first, lib_ver = r.stdout.splitlines()
    ver, installed, cuda = first.split()
    assert (installed, cuda) == ("False", "None"), first
    assert lib_ver.split()[1] == ver, (lib_ver, ver)  # "normgate X.Y.Z (commit)"
    # Neither installed nor in a source tree: importing still works.
    with tempfile.TemporaryDirectory() as tmp:
        site, _ = _installed_copy(os.path.join(tmp, "a", "b"), with_lib=False, with_info=False)
        r = _run(site, "import normgate; print(normgate.__version__)")
        assert r.returncode == 0 and r.stdout.strip() == "0+unknown", (r.stdout, r.stderr)


def test_cli_launcher_runs_the_packaged_binary():
    script = "#!/bin/sh\necho \"argv0=$0 args=$*\"\nexit 5\n"
    with tempfile.TemporaryDirectory() as tmp:
        site, pkg = _installed_copy(tmp, with_lib=False, cli_script=script)
        r = _run(site, "import sys; sys.argv = ['normgate', 'gate', 'a b', '--x']; "
                       "from normgate._cli import main; sys.exit(main())")
        assert r.returncode == 5, (r.returncode, r.stdout, r.stderr)
        # execv replaced the process: the script ran as bin/normgate with the same arguments
        assert r.stdout.strip() == "argv0=%s args=gate a b --x" % os.path.join(pkg, "bin", "normgate"), r.stdout
    with tempfile.TemporaryDirectory() as tmp:
        site, pkg = _installed_copy(tmp, with_lib=False)
        r = _run(site, "import sys; from normgate._cli import main; sys.exit(main())")
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert os.path.join(pkg, "bin", "normgate") in r.stderr and "pip install ." in r.stderr, r.stderr


if __name__ == "__main__":
    from plain_runner import run_module_tests  # python/tests/, on sys.path as the script's folder

    run_module_tests(globals())
