"""The declared sources of a normgate.Implementation (python/normgate/gate.py,
source_sha256): a folder's files are read only when they are regular files
(a symbolic link: its target). A FIFO in the folder is refused without being
opened (the open used to block forever), a link to /dev/zero is refused
(it was read until memory ran out), a dangling link or a link loop is a
ValueError naming the file (a bare FileNotFoundError before), and a folder
that cannot be listed is refused, not skipped. Regular files keep the
identity they had.

Each refusal runs in a child process with a timeout and an address-space
limit, so that a regression fails the test instead of hanging it or filling
the memory. Needs neither torch nor the library. Runs under pytest, or alone
(`python3 python/tests/test_sources.py`); prints "N passed, N failed".
"""

import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, PKG)

import normgate  # noqa: E402

# In the child: Implementation(sources=[argv[1]]); prints the ValueError, exit 0; accepted: exit 1.
CHILD = r"""
import sys
import normgate
try:
    normgate.Implementation("py_src", lambda g: g, sources=[sys.argv[1]], device="cpu")
except ValueError as e:
    print("ValueError: %s" % e)
    sys.exit(0)
print("accepted")
sys.exit(1)
"""


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # /dev/zero read to the end: MemoryError, soon


def refusal(src):
    """The ValueError message Implementation(sources=[src]) gives in a child
    process (AssertionError for anything else: a hang past 20 s, a traceback,
    an acceptance)."""
    env = dict(os.environ, PYTHONPATH=PKG)
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, src], env=env, capture_output=True, text=True, timeout=20,
                           preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        raise AssertionError("Implementation(sources=[%r]) still running after 20 s (a FIFO opened?)" % src)
    assert r.returncode == 0 and r.stdout.startswith("ValueError: "), (src, r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout[len("ValueError: "):].strip()


def folder_with(make):
    """A temporary folder holding a.py (a regular file) and what make(folder) adds."""
    d = tempfile.mkdtemp(prefix="normgate_sources_")
    with open(os.path.join(d, "a.py"), "w") as f:
        f.write("def step(g):\n    return g\n")
    make(d)
    return d


def test_a_fifo_in_a_source_folder_is_refused_without_opening_it():
    d = folder_with(lambda d: os.mkfifo(os.path.join(d, "f.py")))
    try:
        msg = refusal(d)
        assert "sources: file %r is not a regular file (a FIFO)" % os.path.join(d, "f.py") in msg, msg
    finally:
        shutil.rmtree(d)


def test_a_link_to_a_device_in_a_source_folder_is_refused():
    d = folder_with(lambda d: os.symlink("/dev/zero", os.path.join(d, "z.py")))
    try:
        msg = refusal(d)
        assert "sources: file %r is not a regular file (a link to a character device)" % os.path.join(d, "z.py") \
            in msg, msg
    finally:
        shutil.rmtree(d)


def test_a_dangling_link_or_a_link_loop_is_a_value_error_naming_it():
    d = folder_with(lambda d: os.symlink(os.path.join(d, "nowhere.py"), os.path.join(d, "b.py")))
    try:
        msg = refusal(d)
        assert "sources: file %r cannot be read (a symbolic link to a missing file)" % os.path.join(d, "b.py") \
            in msg, msg
        os.unlink(os.path.join(d, "b.py"))
        os.symlink("loop.py", os.path.join(d, "loop.py"))
        msg = refusal(d)
        assert "sources: file %r cannot be read (" % os.path.join(d, "loop.py") in msg, msg
    finally:
        shutil.rmtree(d)


def test_a_folder_that_cannot_be_listed_is_refused_not_skipped():
    # os.walk skipped a folder it could not list (a changed identity, silently).
    # The listing fails here by a stand-in for os.scandir (root lists any folder).
    d = folder_with(lambda d: os.mkdir(os.path.join(d, "sub")))
    sub = os.path.join(d, "sub")
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path) == sub:
            raise PermissionError(13, "Permission denied", sub)
        return real(path)

    os.scandir = scandir
    try:
        try:
            normgate.Implementation("py_src", lambda g: g, sources=[d], device="cpu")
        except ValueError as e:
            assert "sources: folder %r cannot be read (Permission denied)" % sub in str(e), str(e)
        else:
            raise AssertionError("a folder that cannot be listed must be refused")
    finally:
        os.scandir = real
        shutil.rmtree(d)


def test_regular_files_and_links_to_them_keep_their_identity():
    d = folder_with(lambda d: os.symlink("a.py", os.path.join(d, "b.py")))
    try:
        data = open(os.path.join(d, "a.py"), "rb").read()
        h = hashlib.sha256(data).hexdigest()
        # source_sha256: SHA-256 of "sha256(bytes)  label\n" per file, in sorted order.
        want = hashlib.sha256(("%s  a.py\n%s  b.py\n" % (h, h)).encode()).hexdigest()
        assert normgate.source_sha256([d]) == want
        assert normgate.Implementation("py_src", lambda g: g, sources=[d], device="cpu").source_sha256 == want
    finally:
        shutil.rmtree(d)


def test_a_symlinked_sub_folder_is_part_of_the_identity():
    # os.walk did not follow a linked sub-folder: an edit of a kernel file
    # under one left the identity (and the approvals keyed to it) unchanged.
    # A link back up (a cycle) is walked once.
    d = tempfile.mkdtemp(prefix="ng_src_")
    try:
        real = os.path.join(d, "real")
        src = os.path.join(d, "src")
        os.mkdir(real)
        os.mkdir(src)
        with open(os.path.join(src, "a.py"), "w") as f:
            f.write("a = 1\n")
        with open(os.path.join(real, "k.cu"), "w") as f:
            f.write("// kernel v1\n")
        os.symlink(real, os.path.join(src, "linked"))
        os.symlink(src, os.path.join(real, "up"))  # a cycle
        ident = lambda: normgate.Implementation("py_src", lambda g: g, sources=[src], device="cpu").source_sha256
        before = ident()
        with open(os.path.join(real, "k.cu"), "w") as f:
            f.write("// kernel v2\n")
        assert ident() != before, "an edit under a linked sub-folder left the identity unchanged"
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    from plain_runner import run_module_tests  # python/tests/, on sys.path as the script's folder

    run_module_tests(globals())
