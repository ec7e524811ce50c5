"""audit/plot_maps.py (what `normgate plot` runs) on bad input and on
interruption, over a small case file shipped in datasets/cases/:

  - a --report whose window has a route or variant that is not a string, or
    JSON nested 100 000 deep: exit 2, one line naming the report and the
    field, no traceback, nothing written (a traceback, exit 1 and pictures
    without index.html before);
  - a re-plot that fails (a file-size limit, a folder where index.html goes)
    leaves the previous run's files as they were and no temporary file (it
    deleted the pictures it had already replaced before);
  - SIGINT or SIGTERM while drawing: exit 130 / 143, one line, no traceback,
    no picture, no temporary file, the folder removed when the run made it;
  - a small file declaring huge datasets: exit 2 naming the file and shape.

Needs a python3 with h5py, numpy and matplotlib (the one running the tests,
python3 on PATH or /usr/bin/python3, as tests/audit/plot_maps_test.sh
looks); skips without one. Each run takes a second or two.
"""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(REPO, "audit", "plot_maps.py")
CASE = os.path.join(REPO, "datasets", "cases", "H=256,T=7,w=bf16,form=heads4,family=cancel,seed=2,bwd_det_chunked.h5")
PLAIN = os.path.join(REPO, "datasets", "cases", "H=64,T=600,w=bf16,form=plain,family=cancel,seed=1,ctl_fp32_seq.h5")


def _plot_python():
    for c in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if c and subprocess.run([c, "-c", "import h5py, matplotlib, numpy"], capture_output=True).returncode == 0:
            return c
    return None


PY = _plot_python()
pytestmark = pytest.mark.skipif(PY is None, reason="no python3 with h5py, numpy and matplotlib "
                                                   "(pip install h5py matplotlib numpy)")


def _child_setup(fsize=None):
    def setup():
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python's KeyboardInterrupt, even if the runner ignores it
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return setup


def plot(*args, fsize=None):
    return subprocess.run([PY, SCRIPT, *args], capture_output=True, text=True, timeout=120,
                          preexec_fn=_child_setup(fsize))


def snapshot(d):
    """{name: bytes} of every file in d (temporary files included)."""
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def one_error_line(r):
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("field,value", [("route", 7), ("variant", [1]), ("cases", "many"),
                                         ("window", None)])
def test_a_report_field_of_the_wrong_type_is_exit_2_naming_it(tmp_path, field, value):
    w = {"window": "bwd det H=256 w=bf16 form=heads4 T=1..8", "outputs": {}, "route": "t.toml:3",
         "variant": "bwd_det_chunked"}
    w[field] = value
    rep = tmp_path / "rep.json"
    rep.write_text(json.dumps({"windows": [w]}))
    out = tmp_path / "out"
    r = plot(CASE, "-o", str(out), "--report", str(rep))
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = one_error_line(r)
    assert line == "plot_maps.py: error: %s is not a well-formed gate report: windows[0].%s is %s, not %s" % (
        rep, field, json.dumps(value), "an integer" if field == "cases" else "a string"), line
    assert not out.exists() and r.stdout == ""


def test_a_deeply_nested_report_is_exit_2(tmp_path):
    rep = tmp_path / "deep.json"
    rep.write_text("[" * 100000 + "]" * 100000)
    out = tmp_path / "out"
    r = plot(CASE, "-o", str(out), "--report", str(rep))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert one_error_line(r) == "plot_maps.py: error: %s: cannot read the report (nested too deeply)" % rep
    assert not out.exists()


def test_a_failed_replot_keeps_the_previous_files(tmp_path):
    # The sizes of the pictures at the default dpi, in the order they are drawn.
    r = plot(CASE, "-o", str(tmp_path / "sizes"))
    assert r.returncode == 0, r.stderr
    sizes = [os.path.getsize(line[len("wrote "):]) for line in r.stdout.splitlines() if line.endswith(".png")]
    assert len(sizes) == 3, r.stdout  # dx, dw, hist
    # A file-size limit that the first picture fits and a later one does not
    # (so a run that replaced files in place had replaced one when it failed:
    # it deleted it then), else one that the first does not fit.
    limit = sizes[0] + 1 if max(sizes[1:]) > sizes[0] else sizes[0] - 1
    out = tmp_path / "out"
    r = plot(CASE, "-o", str(out), "--dpi", "60")
    assert r.returncode == 0, r.stderr
    before = snapshot(out)
    assert "index.html" in before and len(before) == 4, sorted(before)
    # The same pictures again at the default dpi, under the limit: one cannot be written.
    r = plot(CASE, "-o", str(out), fsize=limit)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "cannot write" in one_error_line(r) and "File too large" in r.stderr, r.stderr
    assert snapshot(out) == before  # the earlier run's pictures and index, byte for byte; no temporary file
    # A folder where index.html goes: refused before drawing, the pictures untouched.
    os.unlink(out / "index.html")
    (out / "index.html").mkdir()
    r = plot(CASE, "-o", str(out))
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "cannot write index.html in %s: a folder of that name is in the way" % out in one_error_line(r)
    (out / "index.html").rmdir()
    del before["index.html"]
    assert snapshot(out) == before


def _interrupt(out, signum):
    """Run the script into out and send it signum once its first temporary file exists."""
    p = subprocess.Popen([PY, SCRIPT, CASE, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=_child_setup())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            if os.path.isdir(out) and any(n.endswith(".tmp") for n in os.listdir(out)):
                break
            time.sleep(0.002)
        assert p.poll() is None, "the run ended before its first temporary file was seen: " + p.stderr.read()
        p.send_signal(signum)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, stdout, stderr


@pytest.mark.parametrize("signum,name", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_an_interrupted_run_leaves_nothing_and_no_traceback(tmp_path, signum, name):
    out = tmp_path / "new"
    rc, stdout, stderr = _interrupt(out, signum)
    assert rc == 128 + signum, (rc, stderr)
    assert "Traceback" not in stderr and stderr.strip() == \
        "plot_maps.py: interrupted (%s): nothing of this run was left in %s" % (name, out), stderr
    assert not out.exists(), os.listdir(out)  # the folder this run made, removed
    assert stdout == ""
    # Into the folder of an earlier run: its files stay as they were.
    old = tmp_path / "old"
    r = plot(PLAIN, "-o", str(old), "--dpi", "40")
    assert r.returncode == 0, r.stderr
    before = snapshot(old)
    rc, _, stderr = _interrupt(old, signum)
    assert rc == 128 + signum and "Traceback" not in stderr, (rc, stderr)
    assert snapshot(old) == before


def test_a_file_declaring_huge_datasets_is_exit_2_naming_it(tmp_path):
    h5py = pytest.importorskip("h5py")
    np = pytest.importorskip("numpy")
    p = str(tmp_path / "huge.h5")
    with h5py.File(CASE, "r") as s, h5py.File(p, "w") as d:  # /tmp/adv/craft_huge.py, the maps only
        for k, v in s.attrs.items():
            d.attrs[k] = v
        s.copy("maps", d)
        del d["maps/dx_tiles"]
        d.create_dataset("maps/dx_tiles", shape=(2 ** 31, 16384), dtype="<f8", chunks=(1, 16384))
        assert np.dtype("<f8").itemsize == 8
    out = tmp_path / "out"
    r = plot(p, "-o", str(out))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert one_error_line(r) == ("plot_maps.py: error: %s: dataset /maps/dx_tiles declares shape [2147483648, 16384] "
                                 "(281474976710656 bytes) but the file stores only 0 bytes of it (damaged or "
                                 "crafted: refused before reading it)" % p)
    assert not out.exists()
