"""normgate.gate over Python implementations on the CPU (no GPU needed).

An FP64 reference step passes; the same step with dw as an FP32 sequential
column sum fails the cancel family (the negative control's arithmetic);
changing the declared sources makes the approval stale; a gate interrupted
by Ctrl-C resumes from its journal to an uninterrupted run's report; bad
arguments raise naming the value, before anything is written. Windows are
tiny (H = 64, a few T points, 3x1 seeds) so the file runs in seconds.
"""

import json
import math
import os
import re
import sys

import pytest

torch = pytest.importorskip("torch", reason="normgate.gate tests need torch")

import normgate  # noqa: E402
from normgate import _lib  # noqa: E402

if not _lib.loadable():
    pytest.skip("libnormgate_capi.so not found (build it, or set NORMGATE_LIB)", allow_module_level=True)

SMALL = dict(seeds="3x1", t_per_window=2, dense_points=1, fresh_factor=1, progress=False, threads=1)


def fp64_step(g):
    """y, rstd, dx, dw in binary64, each rounded once to its output dtype."""
    x, w, dy = g["x"].double(), g["w"].double(), g["dy"].double()
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + g["eps"])
    xhat = x * rstd
    gw = dy * w
    dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    dw = (dy * xhat).reshape(-1, x.shape[-1]).sum(0)
    return {"y": (xhat * w).bfloat16(), "rstd": rstd.reshape(-1).float(), "dx": dx.bfloat16(), "dw": dw.float()}


def flaky_step(calls):
    """fp64_step whose dw element 3 flips its last bit on every second call
    (calls["n"] counts them): a deterministic implementation that is not."""
    def step(g):
        calls["n"] += 1
        out = fp64_step(g)
        if calls["n"] % 2 == 0:
            out["dw"].view(torch.int32)[3] ^= 1
        return out
    return step


def fp32_sequential_dw_step(g):
    """fp64_step, but dw summed over rows one at a time in FP32 (ctl_fp32_seq's dw)."""
    out = fp64_step(g)
    x, dy = g["x"].float(), g["dy"].float()
    rstd = out["rstd"].reshape(-1, 1)
    prod = dy.reshape(-1, x.shape[-1]) * (x.reshape(-1, x.shape[-1]) * rstd)
    acc = torch.zeros(x.shape[-1], dtype=torch.float32)
    for r in range(prod.shape[0]):
        acc = acc + prod[r]
    out["dw"] = acc
    return out


def windows_of(rep):
    """The report's windows without what differs between a resumed and a fresh run."""
    return [{k: v for k, v in w.items()} for w in rep["windows"]]


def test_fp64_reference_passes(tmp_path):
    impl = normgate.Implementation("py_fp64_ref", fp64_step, sources=[fp64_step], device="cpu")
    rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 40)}], journal=str(tmp_path / "j"),
                        report_json=str(tmp_path / "r.json"), report_md=str(tmp_path / "r.md"), **SMALL)
    assert rep["verdict"] == "PASS", rep["markdown"]
    umask = os.umask(0)
    os.umask(umask)
    # The generated table has the mode of any file the user writes (not mkstemp's 0600).
    assert os.stat(rep["table_path"]).st_mode & 0o777 == 0o666 & ~umask
    (w,) = rep["windows"]
    assert w["variant"] == "py_fp64_ref"
    assert w["source_sha256"] == impl.source_sha256
    assert 0 < w["outputs"]["dw"]["max_err_tol"] <= 1
    assert w["outputs"]["dx"]["max_err_tol"] > 0  # dx was checked
    assert rep["externals"][0]["ran_on"] == "python callable on cpu"
    # The reports on disk are the gate's; the table is beside them.
    with open(tmp_path / "r.json") as f:
        assert json.load(f)["windows"][0]["variant"] == "py_fp64_ref"
    assert "external implementation `py_fp64_ref`" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "normgate-gate.toml").read_text().count("py_fp64_ref") == 2  # description + route


def test_a_step_that_changes_directory_does_not_move_the_outputs(tmp_path, monkeypatch):
    # Relative output paths are fixed when gate() is called: a step's chdir
    # (here on its first call) does not send the journal, reports or table elsewhere.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)

    def wandering_step(g):
        os.chdir(elsewhere)
        return fp64_step(g)

    impl = normgate.Implementation("py_wandering", wandering_step, sources=[fp64_step], device="cpu")
    rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 40)}], journal="j.jsonl", report_json="r.json",
                        report_md="r.md", **SMALL)
    assert rep["verdict"] == "PASS", rep["markdown"]
    assert os.getcwd() == str(elsewhere)  # the step did move
    for name in ("j.jsonl", "r.json", "r.md", "normgate-gate.toml"):
        assert (tmp_path / name).is_file(), name
        assert not (elsewhere / name).exists(), name
    assert rep["table_path"] == str(tmp_path / "normgate-gate.toml")


def test_fp32_sequential_dw_fails_cancel(tmp_path):
    impl = normgate.Implementation("py_fp32_seq", fp32_sequential_dw_step, sources=[fp32_sequential_dw_step],
                                   device="cpu")
    rep = normgate.gate(impl, windows=["H=64,T=600..700"], table_out=str(tmp_path / "t.toml"), **SMALL)
    assert rep["verdict"] == "FAIL"
    (w,) = rep["windows"]
    dw = w["outputs"]["dw"]
    assert dw["max_err_tol"] > 1
    assert "family=cancel" in dw["worst_case"]
    fams = {f["family"]: f for f in w["families"]}
    assert fams["cancel"]["failed"] > 0
    assert fams["normal"]["failed"] == 0  # only cancel defeats an FP32 sequential sum here
    # y, rstd, dx are fp64_step's: within budget
    for o in ("y", "rstd", "dx"):
        assert w["outputs"][o]["max_err_tol"] <= 1, o
    # The report's rerun line for a Python implementation is normgate.check
    # (`normgate check --variant` cannot load a Python callable: exit 2).
    md = rep["markdown"]
    assert 'rerun it in Python with: normgate.check(impl, "%s")' % dw["worst_case"] in md, md
    assert "rerun it with: normgate check" not in md, md
    again = normgate.check(impl, dw["worst_case"])
    assert again["pass"] is False and again["outputs"]["dw"]["err_tol"] == dw["max_err_tol"], again["outputs"]["dw"]


def test_the_device_an_implementation_computes_on_reaches_the_c_api():
    # ng_external_desc.device: 0 for the host, 1 + N for cuda:N, so case
    # files name the GPU of an implementation on cuda (tests/capi pins the C
    # side's offsets).
    import ctypes
    import importlib
    G = importlib.import_module("normgate.gate")
    assert ctypes.sizeof(G._ExternalDesc) == 96
    assert [G._ExternalDesc.device.offset, G._ExternalDesc.h_min.offset, G._ExternalDesc.run.offset] == [20, 24, 80]
    assert G._device_code("cpu") == 0
    assert G._device_code("cuda:0") == 1
    assert G._device_code("cuda:3") == 4


def test_export_reruns_a_python_implementations_worst_cases(tmp_path):
    # normgate.export: the error maps of a report's worst cases, with the
    # Python implementation run again in this process (`normgate export`
    # cannot load it). The maps file is bound to the report's SHA-256.
    import ctypes
    import hashlib
    import importlib
    G = importlib.import_module("normgate.gate")
    # The ctypes mirror of ng_export_options (tests/capi/capi_test.cpp pins the C side).
    assert ctypes.sizeof(G._ExportOptions) == 80
    assert [G._ExportOptions.report.offset, G._ExportOptions.keep.offset, G._ExportOptions.tile.offset,
            G._ExportOptions.threads.offset, G._ExportOptions.cancel.offset] == [8, 24, 40, 64, 72]
    impl = normgate.Implementation("py_fp32seq_x", fp32_sequential_dw_step, source_sha256="ef" * 32, device="cpu")
    rj = str(tmp_path / "r.json")
    rep = normgate.gate(impl, windows=["H=64,T=600..700"], report_json=rj, **SMALL)
    assert rep["verdict"] == "FAIL"
    (w,) = rep["windows"]
    out = str(tmp_path / "maps.h5")
    # Not registered here: refused before any case runs, nothing written.
    # (A fresh process has no registration; here the gate registered it, so
    # a report naming an unknown implementation stands in.)
    other = json.load(open(rj))
    other["windows"][0]["variant"] = other["windows"][0]["impl"] = "py_never_registered"
    other["externals"] = []  # (with it listed, export() refuses it before the library: the next test)
    rj2 = str(tmp_path / "other.json")
    with open(rj2, "w") as f:
        json.dump(other, f)
    with pytest.raises(ValueError, match="ran 'py_never_registered', which this process does not know"):
        normgate.export(rj2, out)
    assert not os.path.exists(out)
    res = normgate.export(rj, out, impls=[impl], backend="cpu", threads=1)
    assert os.path.isfile(out)
    assert res["out"] == out
    assert res["report_sha256"] == hashlib.sha256(open(rj, "rb").read()).hexdigest()
    # Every output's worst case of the window, each run again with the same
    # err/tol as the gate found (the same case, the same implementation).
    worst = {o: v["worst_case"] for o, v in w["outputs"].items()}
    cases = {p["case"] for p in res["pairs"]}
    assert set(worst.values()) <= cases, (worst, cases)
    for p in res["pairs"]:
        assert p["impl"] == "py_fp32seq_x" and p["window"] == w["window"], p
    dw_pair = next(p for p in res["pairs"] if p["case"] == worst["dw"])
    assert dw_pair["max_err_tol"]["dw"] == w["outputs"]["dw"]["max_err_tol"] > 1, dw_pair
    assert dw_pair["verdict"] == "fail"
    with pytest.raises(ValueError, match="all=True and keep=2 exclude each other"):
        normgate.export(rj, out, impls=[impl], all=True, keep=2)
    before = open(out, "rb").read()
    # ng_export's cancel flag set: NG_ECANCEL before the first case, the file
    # as it was (Python's Ctrl-C handler sets this flag).
    L = G._L()
    o = G._ExportOptions()
    L.ng_export_options_init(ctypes.byref(o))
    flag = ctypes.c_int32(1)
    o.report, o.out, o.backend, o.cancel = rj.encode(), out.encode(), b"cpu", ctypes.pointer(flag)
    res_p = G._vp()
    assert L.ng_export(ctypes.byref(o), ctypes.byref(res_p)) == 4 and not res_p.value  # NG_ECANCEL
    assert "cancelled (ng_export_options.cancel set): nothing written" in (L.ng_last_error() or b"").decode()
    assert open(out, "rb").read() == before
    # Other code under the report's name (another source hash): refused, both
    # hashes named, the maps file as it was. (An adversarial pass exported a
    # changed kernel's maps under a PASS report.)
    changed = normgate.Implementation("py_fp32seq_x", fp64_step, source_sha256="cd" * 32, device="cpu")
    with pytest.raises(ValueError, match="gated py_fp32seq_x of source efefefefefef, and this process has source "
                                         "cdcdcdcdcdcd"):
        normgate.export(rj, out, impls=[changed])
    assert open(out, "rb").read() == before
    # A step that breaks the interface while exporting: its own error, not a
    # generic one (the callbacks report to export as to gate).
    broken = normgate.Implementation("py_fp32seq_x", lambda g: [1, 2], source_sha256="ef" * 32, device="cpu")
    with pytest.raises(TypeError, match="returned list, not a dict of outputs"):
        normgate.export(rj, out, impls=[broken])
    assert open(out, "rb").read() == before
    with pytest.raises(TypeError, match=r"impls\[0\] is str"):
        normgate.export(rj, out, impls=["py_fp32seq_x"])


def test_export_needs_the_reports_externals_and_order_does_not_change_the_campaign(tmp_path):
    # export() without the implementation a gate report names: refused (a
    # callable registered by the earlier gate() ran under its name).
    calls = {"n": 0}

    def counted(g):
        calls["n"] += 1
        return fp64_step(g)

    def fstep(g):
        x, w = g["x"].double(), g["w"].double()
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + g["eps"])
        return {"y": (x * r * w).bfloat16(), "rstd": r.flatten().float()}
    b = normgate.Implementation("py_exp_b", counted, source_sha256="ab" * 32, device="cpu")
    f = normgate.Implementation("py_exp_f", fstep, op="fwd", source_sha256="ab" * 32, device="cpu")
    rj, j = str(tmp_path / "r.json"), str(tmp_path / "j.jsonl")
    win = [{"H": 64, "T": (1, 8)}]
    assert normgate.gate([f, b], windows=win, journal=j, report_json=rj, **SMALL)["pass"]
    n = calls["n"]
    with pytest.raises(ValueError, match="names external implementations py_exp_b, py_exp_f, not in impls"):
        normgate.export(rj, str(tmp_path / "m.h5"), backend="cpu", threads=1)
    with pytest.raises(ValueError, match="names external implementation py_exp_f, not in impls"):
        normgate.export(rj, str(tmp_path / "m.h5"), impls=[b], backend="cpu", threads=1)
    assert calls["n"] == n and not os.path.exists(str(tmp_path / "m.h5"))
    # The same implementations in another order: the same table, the same
    # campaign (the journal resumes; it was refused as another campaign).
    again = normgate.gate([b, f], windows=win, journal=j, report_json=rj, **SMALL)
    assert again["pass"] and again["journal"]["run_now"] == 0, again["journal"]


def test_export_of_a_forward_implementation_gives_y_and_rstd(tmp_path):
    # A forward implementation runs alone (no carrier backward): its pairs
    # carry y and rstd, dx and dw NaN (the export failed on them before).
    def fstep(g):
        x, w = g["x"].double(), g["w"].double()
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + g["eps"])
        return {"y": (x * r * w).bfloat16(), "rstd": r.flatten().float()}
    f = normgate.Implementation("py_fwd_x", fstep, op="fwd", source_sha256="ab" * 32, device="cpu")
    rj = str(tmp_path / "f.json")
    rep = normgate.gate(f, windows=[{"H": 64, "T": (1, 8)}], report_json=rj, **SMALL)
    assert rep["verdict"] == "PASS"
    res = normgate.export(rj, str(tmp_path / "f.h5"), impls=[f], backend="cpu", threads=1)
    assert res["pairs"]
    for p in res["pairs"]:
        m = p["max_err_tol"]
        assert 0 <= m["y"] <= 1 and 0 <= m["rstd"] <= 1, m
        assert math.isnan(m["dx"]) and math.isnan(m["dw"]), m
        assert p["verdict"] == "pass", p


def test_a_per_gpu_table_out_shares_the_base_tables_policy_and_approvals(tmp_path):
    # table_out STEM@SLUG.toml (docs/perf/routes.md D26): the policy written
    # for approve=True and the approvals land on STEM's files, the library's
    # rule (ng_table_file), not files of the per-GPU name.
    impl = normgate.Implementation("py_per_gpu", fp64_step, sources=[fp64_step], device="cpu")
    table = str(tmp_path / "t@nvidia-h100-80gb-hbm3.toml")
    rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 20)}], table_out=table, approve=True, backend="cpu",
                        **SMALL)
    assert rep["verdict"] == "PASS", rep["markdown"]
    assert (tmp_path / "t.policy.toml").is_file() and (tmp_path / "t.approvals.json").is_file()
    assert not (tmp_path / "t@nvidia-h100-80gb-hbm3.policy.toml").exists()
    assert not (tmp_path / "t@nvidia-h100-80gb-hbm3.approvals.json").exists()
    # A malformed '@' name is no per-GPU table: files of its own.
    odd = str(tmp_path / "u@H100.toml")
    rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 20)}], table_out=odd, approve=True, backend="cpu", **SMALL)
    assert (tmp_path / "u@H100.policy.toml").is_file() and not (tmp_path / "u.policy.toml").exists()


def test_changed_sources_make_the_approval_stale(tmp_path, monkeypatch):
    src = tmp_path / "kernel_src.py"
    src.write_text("# version 1\n")
    impl = normgate.Implementation("py_stale", fp64_step, sources=[str(src)], device="cpu")
    table = str(tmp_path / "t.toml")
    # backend "cpu": the approval is a cpu-model one on any machine (on a GPU
    # machine "auto" would record gpu, and the dispatcher would count it as is)
    rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 20)}], table_out=table, approve=True, backend="cpu",
                        **SMALL)
    assert rep["verdict"] == "PASS", rep["markdown"]
    assert any(c.startswith("approved cpu-model") for c in rep["approvals"]), rep["approvals"]
    with open(tmp_path / "t.approvals.json") as f:
        (rec,) = json.load(f)["approvals"]
    assert rec["variant"] == "py_stale" and rec["source_sha256"] == impl.source_sha256
    # Without accepting CPU-model approvals the call is refused, and the hint
    # is the Python gate (the CLI cannot run a Python implementation).
    normgate.load_routes(table)
    try:
        r = normgate.route_for("bwd", 64, 10, "bf16", deterministic=True)
        assert r["how"] == "refused" and r["approval"] == "cpu-model only", r
        assert re.search(r"normgate\.gate\(impl, table='" + re.escape(table), r["refused"]), r["refused"]
        assert "--seeds 3x16" not in r["refused"]
    finally:
        normgate.load_routes()
    monkeypatch.setenv("NORMGATE_DISPATCH", "accept-cpu-model")
    try:
        normgate.load_routes(table)
        assert normgate.route_for("bwd", 64, 10, "bf16", deterministic=True)["approval"] == "current"
        src.write_text("# version 2\n")
        changed = normgate.Implementation("py_stale", fp64_step, sources=[str(src)], device="cpu")
        assert changed.source_sha256 != impl.source_sha256
        # Gating the changed code (without approve) registers its new identity.
        normgate.gate(changed, windows=[{"H": 64, "T": (1, 20)}], table_out=table, backend="cpu", **SMALL)
        normgate.load_routes(table)
        assert normgate.route_for("bwd", 64, 10, "bf16", deterministic=True)["approval"] == "stale"
    finally:
        monkeypatch.delenv("NORMGATE_DISPATCH")
        normgate.load_routes()


def test_interrupted_gate_resumes_to_the_same_report(tmp_path):
    # A det implementation runs twice per case (the gate compares the bits),
    # so the fifth case's first call is the ninth.
    calls = {"n": 0, "stop_at": 9}

    def step(g):
        calls["n"] += 1
        if calls["n"] == calls["stop_at"]:
            raise KeyboardInterrupt  # what Ctrl-C raises inside the callable
        return fp64_step(g)

    impl = normgate.Implementation("py_resume", step, source_sha256="ab" * 32, device="cpu")
    win = [{"H": 64, "T": (1, 40)}]
    journal = str(tmp_path / "j.jsonl")
    with pytest.raises(KeyboardInterrupt):
        normgate.gate(impl, windows=win, journal=journal, **SMALL)
    with open(journal) as f:
        assert len(f.read().splitlines()) == 1 + 4  # header + the 4 cases finished before the interrupt
    calls["stop_at"] = -1
    resumed = normgate.gate(impl, windows=win, journal=journal, **SMALL)
    assert resumed["journal"]["resumed"] == 4 and resumed["journal"]["run_now"] > 0
    whole = normgate.gate(impl, windows=win, journal=str(tmp_path / "j2.jsonl"), **SMALL)
    assert whole["journal"]["resumed"] == 0
    assert windows_of(resumed) == windows_of(whole)
    assert resumed["verdict"] == whole["verdict"] == "PASS"


def test_declared_deterministic_but_not_fails_its_window(tmp_path):
    # dw differs in its last bit on every other call: declared det, each case
    # runs twice and is that case's error; declared nondet, it runs once.
    calls = {"n": 0}
    flaky = flaky_step(calls)

    win = [{"H": 64, "T": (1, 8)}]
    det = normgate.Implementation("py_flaky_det", flaky, source_sha256="ef" * 32, device="cpu")
    rep = normgate.gate(det, windows=win, journal=str(tmp_path / "j"), **SMALL)
    assert rep["verdict"] == "FAIL"
    assert "is declared deterministic but two runs on H=64" in rep["markdown"], rep["markdown"]
    assert "output dw element 3 (0x" in rep["markdown"], rep["markdown"]
    # Reported as the finding it is (it read "could not run ... ERROR, no
    # verdict" under a FAIL verdict), with the command that reruns a case,
    # and no closest approach made of empty fields.
    md = rep["markdown"]
    assert ("cases: py_flaky_det is declared deterministic but two runs on one case gave different bits (a finding: "
            "the window FAILs") in md, md
    assert "could not run" not in md, md
    assert "rerun it in Python with: normgate.check(impl, \"H=64,T=" in md, md
    assert "- closest to the budget: not measured: no case of any window gave results" in md, md
    # A finding, not a failure to run: retry_errors=True, the race gone,
    # runs nothing again and the window still fails (it passed before).
    steady = normgate.Implementation("py_flaky_det", fp64_step, source_sha256="ef" * 32, device="cpu")
    rep = normgate.gate(steady, windows=win, journal=str(tmp_path / "j"), retry_errors=True, **SMALL)
    assert rep["verdict"] == "FAIL", rep["markdown"]
    assert rep["journal"]["retried"] == 0 and rep["journal"]["run_now"] == 0
    calls["n"] = 0
    nondet = normgate.Implementation("py_flaky_nondet", flaky, deterministic=False, source_sha256="ef" * 32,
                                     device="cpu")
    rep = normgate.gate(nondet, windows=win, journal=str(tmp_path / "j2"), **SMALL)
    assert rep["verdict"] == "PASS", rep["markdown"]


def test_the_verdict_is_the_runs_error_and_findings_are_not_offered_a_retry(tmp_path, capsys):
    # Every case of the window throws, none over budget: the run's verdict is
    # ERROR, as `normgate gate` says it and the report heads it (it said FAIL).
    def raising(g):
        raise MemoryError("no room for T=%d" % g["T"])

    win = [{"H": 64, "T": (1, 8)}]
    impl = normgate.Implementation("py_raising", raising, source_sha256="cd" * 32, device="cpu")
    rj = str(tmp_path / "r.json")
    rep = normgate.gate(impl, windows=win, journal=str(tmp_path / "j"), report_json=rj,
                        **dict(SMALL, progress=True))
    assert rep["verdict"] == "ERROR", rep["markdown"]
    assert "- verdict: **ERROR**" in rep["markdown"]
    with open(rj) as f:
        assert json.load(f)["verdict"] == "ERROR"
    err = capsys.readouterr().err
    assert "case(s) threw" in err and "retry_errors=True runs them again" in err, err
    # A finding (two runs of a deterministic implementation differ): FAIL,
    # and no retry is offered for it.
    calls = {"n": 0}
    flaky = flaky_step(calls)

    det = normgate.Implementation("py_flaky_msg", flaky, source_sha256="ef" * 32, device="cpu")
    rep = normgate.gate(det, windows=win, journal=str(tmp_path / "j2"), **dict(SMALL, progress=True))
    assert rep["verdict"] == "FAIL", rep["markdown"]
    err = capsys.readouterr().err
    assert "are findings about an implementation" in err and "no retry replaces them" in err, err
    assert "retry_errors=True" not in err, err


def test_check_takes_an_implementation_on_its_device():
    # normgate.check(impl, case) as README shows it: the Implementation's fn on
    # its device (auto: cuda if torch sees one, else cpu), run twice when
    # declared deterministic.
    case = "H=64,T=5,w=bf16,form=plain,family=normal,seed=0"
    impl = normgate.Implementation("py_check_impl", fp64_step, source_sha256="ab" * 32)
    assert normgate.check(impl, case)["pass"]
    calls = {"n": 0}
    flaky = flaky_step(calls)

    det = normgate.Implementation("py_check_flaky", flaky, source_sha256="ab" * 32, device="cpu")
    # A finding, as `normgate check` says it (FAIL), not an exception: the
    # first run's report, failed, naming the element (it raised RuntimeError).
    rep = normgate.check(det, case)
    assert rep["pass"] is False and rep["verdict"] == "fail", rep
    assert re.search("py_check_flaky is declared deterministic but two runs on H=64,T=5.* output dw element 3",
                     rep["nondeterministic"]), rep["nondeterministic"]
    assert calls["n"] == 2
    nondet = normgate.Implementation("py_check_nd", flaky, deterministic=False, source_sha256="ab" * 32,
                                     device="cpu")
    assert normgate.check(nondet, case)["pass"] and calls["n"] == 3
    with pytest.raises(TypeError, match="impl must be a normgate.Implementation or a callable"):
        normgate.check("fp64_step", case, device="cpu")
    # The message gives both bit patterns (dw element 3 differs in its last bit).
    calls["n"] = 0
    assert re.search(r"output dw element 3 \(0x[0-9a-f]{8} then 0x[0-9a-f]{8}\)",
                     normgate.check(det, case)["nondeterministic"])
    # A deterministic implementation that produces no dx, dw (None) and an
    # empty case (T = 0): reproducible, no false alarm, no crash.
    fwd_only = normgate.Implementation("py_check_none", lambda g: dict(fp64_step(g), dx=None, dw=None),
                                       source_sha256="ab" * 32, device="cpu")
    rep = normgate.check(fwd_only, case)
    assert rep["outputs"]["y"]["err_tol"] <= 1
    # ... and it fails, as in the gate: a bwd owes dx and dw (check passed it).
    assert rep["pass"] is False and rep["verdict"] == "fail" and rep["not_produced"] == ["dx", "dw"], rep
    # A case it declares no support for: refused up front, not run.
    with pytest.raises(ValueError, match="py_check_impl does not support case H=64,T=5,w=bf16,form=res"):
        normgate.check(impl, "H=64,T=5,w=bf16,form=res,family=normal,seed=0")
    assert normgate.check(impl, "H=64,T=0,w=bf16,form=plain,family=normal,seed=0")["pass"]
    # An output present in one run only: named.
    flip = {"n": 0}

    def sometimes_dw(g):
        flip["n"] += 1
        out = fp64_step(g)
        if flip["n"] == 2:
            del out["dw"]
        return out

    odd = normgate.Implementation("py_check_odd", sometimes_dw, source_sha256="ab" * 32, device="cpu")
    odd_rep = normgate.check(odd, case)
    assert odd_rep["pass"] is False and re.search(r"gave different outputs: dw is float32 \(64,\), then absent",
                                                  odd_rep["nondeterministic"]), odd_rep
    # The same bits in another shape are the same output (as in the gate).
    shape = {"n": 0}

    def reshaped(g):
        shape["n"] += 1
        out = fp64_step(g)
        if shape["n"] == 2:
            out["y"] = out["y"].reshape(-1)
        return out

    assert normgate.check(normgate.Implementation("py_check_shape", reshaped, source_sha256="ab" * 32,
                                                  device="cpu"), case)["pass"]
    # The gate reads None as "not produced" too (it used to stop the gate).
    rep = normgate.gate(fwd_only, windows=[{"H": 64, "T": (1, 8)}], **SMALL)
    w = rep["windows"][0]
    assert w["verdict"] == "fail" and w["errors"] == 0  # a verdict of the outputs, not an error
    assert math.isinf(w["outputs"]["dw"]["max_err_tol"]) and math.isinf(w["outputs"]["dx"]["max_err_tol"])
    assert w["outputs"]["y"]["max_err_tol"] <= 1


def strings_like_numbers(obj, path="rep", names=()):
    """The places in a report where "inf", "-inf" or "nan" is still a string
    (under a key other than `names`, the fields that hold a name)."""
    if isinstance(obj, dict):
        return [p for k, v in obj.items() if k not in names for p in strings_like_numbers(v, "%s[%r]" % (path, k), names)]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in strings_like_numbers(v, "%s[%d]" % (path, i), names)]
    return [path] if obj in ("inf", "-inf", "nan") else []


def test_non_finite_numbers_are_floats(tmp_path):
    # A kernel whose y is NaN, dx +Inf, dw -Inf: check() and gate() give
    # err/tol, err and got as floats a caller can compare (`> 1` used to raise
    # TypeError on the string "inf"), in every field; the JSON files keep the
    # strings (docs/schemas.md). An implementation named "nan" keeps its name.
    def broken(g):
        out = fp64_step(g)
        out["y"] = torch.full_like(out["y"], float("nan"))
        out["dx"] = torch.full_like(out["dx"], float("inf"))
        out["dw"] = torch.full_like(out["dw"], float("-inf"))
        return out

    case = "H=64,T=8,w=bf16,form=plain,family=llm,seed=2"
    rep = normgate.check(broken, case, device="cpu")
    assert strings_like_numbers(rep) == []
    y, dx, dw = rep["outputs"]["y"], rep["outputs"]["dx"], rep["outputs"]["dw"]
    assert math.isnan(y["got"]) and y["err_tol"] == math.inf and y["err_tol"] > 1
    assert dx["got"] == math.inf and dw["got"] == -math.inf and dw["err"] == math.inf
    assert not rep["pass"] and rep["outputs"]["rstd"]["err_tol"] <= 1
    impl = normgate.Implementation("nan", broken, source_sha256="ab" * 32, device="cpu")
    g = normgate.gate(impl, windows=[{"H": 64, "T": (1, 8)}], report_json=str(tmp_path / "r.json"), **SMALL)
    assert strings_like_numbers(g, names=("name", "fwd", "variant")) == []
    (w,) = g["windows"]
    assert w["variant"] == "nan" and w["outputs"]["y"]["max_err_tol"] == math.inf
    with open(tmp_path / "r.json") as f:
        assert json.load(f)["windows"][0]["outputs"]["y"]["max_err_tol"] == "inf"


def test_approval_changes_are_printed(tmp_path, capsys):
    # approve=True: each change to the approvals file is said on stderr with
    # progress on (a failing window revokes its approval: not silently).
    impl = normgate.Implementation("py_said", fp64_step, source_sha256="ab" * 32, device="cpu")
    args = dict(SMALL, progress=True)
    # The approval's backend is the gate's (backend="auto": gpu where a CUDA
    # device is usable), whichever device the callable runs on.
    backend = "gpu" if _lib.device_available() else "cpu-model"
    normgate.gate(impl, windows=[{"H": 64, "T": (1, 8)}], journal=str(tmp_path / "j1"), approve=True, **args)
    assert "normgate.gate: approved %s bwd det H=64" % backend in capsys.readouterr().err
    bad = normgate.Implementation("py_said", lambda g: dict(fp64_step(g), dw=fp64_step(g)["dw"] * 1.01),
                                  source_sha256="ab" * 32, device="cpu")
    rep = normgate.gate(bad, windows=[{"H": 64, "T": (1, 8)}], journal=str(tmp_path / "j2"), approve=True, **args)
    assert rep["verdict"] == "FAIL"
    assert "normgate.gate: revoked %s approval of bwd det H=64" % backend in capsys.readouterr().err
    assert rep["approvals_refused"] == []
    # The good one again under the same source hash: it passes, but the
    # failure remembered beside the table refutes that source there
    # (routes.md D28), so no approval: said in the report and as a warning
    # (`normgate gate` exits 1), not a quiet PASS.
    with pytest.warns(RuntimeWarning, match=r"approval refused for 1 passing window, not approved"):
        rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 8)}], journal=str(tmp_path / "j3"), approve=True,
                            **args)
    assert rep["verdict"] == "PASS", rep["markdown"]
    assert len(rep["approvals_refused"]) == 1 and "refutes" in rep["approvals_refused"][0], rep["approvals_refused"]
    assert "normgate.gate: refused " in capsys.readouterr().err
    with open(os.path.join(os.path.dirname(rep["table_path"]), "normgate-gate.approvals.json")) as f:
        assert json.load(f)["approvals"] == []


def test_a_refusal_by_the_library_leaves_the_table_as_it_was(tmp_path):
    # The same journal with other windows: the library refuses it (another
    # campaign) before any case runs, and the table written for the second
    # call is put back, so table, journal and reports still agree.
    impl = normgate.Implementation("py_refused", fp64_step, source_sha256="ab" * 32, device="cpu")
    journal = str(tmp_path / "j.jsonl")
    rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 8)}], journal=journal, approve=True, **SMALL)
    table = rep["table_path"]
    before = open(table).read()
    policy = table[:-5] + ".policy.toml"
    os.unlink(policy)  # so that the second call would write one
    with pytest.raises(ValueError, match="journal"):
        normgate.gate(impl, windows=[{"H": 64, "T": (1, 16)}], journal=journal, approve=True, **SMALL)
    assert open(table).read() == before
    assert not os.path.exists(policy)
    if not torch.cuda.is_available():
        out = tmp_path / "gpu"
        out.mkdir()
        with pytest.raises(ValueError, match="backend='gpu' but no usable CUDA device"):
            normgate.gate(impl, windows=[{"H": 64, "T": (1, 8)}], journal=str(out / "j"), approve=True,
                          backend="gpu", **SMALL)
        assert os.listdir(out) == []


_BIG_WINDOW_SCRIPT = r"""
import os, resource, sys
import torch
import normgate
from normgate import _lib
assert _lib.loadable()
_lib.lib()  # loaded before the limit: only the gate's own allocations count
page = os.sysconf("SC_PAGE_SIZE")
used = int(open("/proc/self/statm").read().split()[0]) * page
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (used + (3 << 30), hard))
impl = normgate.Implementation("py_big", lambda g: {}, source_sha256="ef" * 32, device="cpu")
out = sys.argv[1]
try:
    normgate.gate(impl, windows=[{"H": 6144, "T": (65537, 131072)}], journal=os.path.join(out, "j.jsonl"),
                  report_json=os.path.join(out, "r.json"), backend="cpu", seeds="3x1", t_per_window=2,
                  dense_points=1, fresh_factor=1, progress=False, threads=1)
    print("NOT REFUSED")
except ValueError as e:
    print("REFUSED:", e)
"""


def test_a_window_that_cannot_fit_in_host_memory_is_refused_before_any_work(tmp_path):
    # As `normgate gate` refuses it (gate/host_memory.h): a [131072, 6144]
    # case under an address-space limit 3 GiB above what the process holds
    # needs about 6 GiB for its BF16 tensors alone. Before, gate() started
    # and every case ended in std::bad_alloc. Nothing is written.
    import subprocess
    import sys
    out = tmp_path / "big"
    out.mkdir()
    r = subprocess.run([sys.executable, "-c", _BIG_WINDOW_SCRIPT, str(out)], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("REFUSED:"), r.stdout + r.stderr
    msg = r.stdout
    assert "H=6144" in msg and "T=131072" in msg, msg
    assert "131072 rows of 6144" in msg and "needs about" in msg, msg
    assert "address-space limit (ulimit -v)" in msg and "choose T <= " in msg, msg
    t_max = int(re.search(r"choose T <= (\d+)", msg).group(1))
    assert 0 < t_max < 131072, msg
    assert os.listdir(out) == []


def test_ng_gate_refuses_counts_and_flags_out_of_range_before_any_work(tmp_path):
    # The C ABI itself (Python's gate() checks its own arguments first): the
    # CLI's upper bounds and flags of 0 or 1 only. Before, ng_gate took
    # fresh_factor 2^31-1 and failed for memory after running the grid, and
    # read approve = 2 as true.
    import ctypes
    import importlib
    G = importlib.import_module("normgate.gate")  # the module (normgate.gate is also the function)
    L = G._L()
    table = tmp_path / "t.toml"
    table.write_text('arch = "sm90a"\nroute = [\n  { op = "fwd", H = 64, w = "bf16", form = "plain", '
                     'T = [1, 8], variant = "fwd_rowwise" },\n]\n')
    journal = tmp_path / "j.jsonl"
    for field, value, words in (("fresh_factor", 2**31 - 1, "--fresh-factor 2147483647 > 1048576"),
                                ("t_per_window", 2**31 - 1, "--t-per-window 2147483647 > 1048576"),
                                ("dense_points", 1 << 21, "--dense-points 2097152 > 1048576"),
                                ("dense_step", 1 << 62, "--dense-step 4611686018427387904 > 2147483648"),
                                ("approve", 2, "approve = 2 is not 0 or 1"),
                                ("dense_all_seeds", 7, "dense_all_seeds = 7 is not 0 or 1")):
        o = G._GateOptions()
        L.ng_gate_options_init(ctypes.byref(o))
        o.table, o.seeds, o.backend, o.journal = bytes(table), b"3x1", b"cpu", bytes(journal)
        setattr(o, field, value)
        out = G._vp()
        rc = L.ng_gate(ctypes.byref(o), ctypes.byref(out))
        assert rc == 2 and not out.value, (field, rc)
        err = (L.ng_last_error() or b"").decode()
        assert words in err, (field, err)
        assert not journal.exists(), field


def test_broken_return_value_stops_the_gate_with_its_error(tmp_path):
    impl = normgate.Implementation("py_badtype", lambda g: {"dw": torch.zeros(64, dtype=torch.float64)},
                                   source_sha256="cd" * 32, device="cpu")
    with pytest.raises(TypeError, match="output 'dw' has dtype torch.float64"):
        normgate.gate(impl, windows=[{"H": 64, "T": (1, 4)}], journal=str(tmp_path / "j"), **SMALL)


def test_bad_arguments_raise_naming_the_value(tmp_path):
    with pytest.raises(ValueError, match="name: 'my kernel'"):
        normgate.Implementation("my kernel", fp64_step, source_sha256="ab" * 32)
    with pytest.raises(ValueError, match=r"name: 'all' is reserved or reads as an option \(check --variant all\)"):
        normgate.Implementation("all", fp64_step, source_sha256="ab" * 32)
    with pytest.raises(ValueError, match="name: '-k' is reserved or reads as an option \\(a leading '-'\\)"):
        normgate.Implementation("-k", fp64_step, source_sha256="ab" * 32)
    with pytest.raises(ValueError, match=r"name: 'ctl_mine' is reserved or reads as an option "
                                         r"\(the negative controls' prefix\)"):
        normgate.Implementation("ctl_mine", fp64_step, source_sha256="ab" * 32)
    with pytest.raises(ValueError, match=r"H = \(10, 5\): h_min > h_max"):
        normgate.Implementation("k", fp64_step, H=(10, 5), source_sha256="ab" * 32)
    # A string is not unpacked into H[0] = '6' (adversarial pass), a built-in
    # module names itself, a path of any bytes names the path, and check()'s
    # device is named (torch's RuntimeError named none).
    with pytest.raises(TypeError, match=r"H must be an int or \(h_min, h_max\), got '64'"):
        normgate.Implementation("k", fp64_step, H="64", source_sha256="ab" * 32)
    with pytest.raises(ValueError, match="sources: module sys has no source file"):
        normgate.Implementation("k", fp64_step, sources=[sys])
    with pytest.raises(ValueError, match="is not a file or directory"):
        normgate.Implementation("k", fp64_step, sources=[b"/nonexistent/\xff"])
    with pytest.raises(ValueError, match="device: 'junk' is not 'cpu', 'cuda' or 'cuda:N'"):
        normgate.check(fp64_step, "H=64,T=5,w=bf16,form=plain,family=normal,seed=0", device="junk")
    # A case that cannot fit in host memory: refused before any allocation,
    # naming the bytes (torch's allocator error, or the OOM killer, before).
    huge = "H=16384,T=2000000000,w=bf16,form=plain,family=cancel,seed=0"
    with pytest.raises(ValueError, match="of host memory"):
        normgate.check(fp64_step, huge, device="cpu")
    with pytest.raises(ValueError, match=r"\(its inputs\).*choose T <="):
        normgate.generate(huge, device="cpu")
    with pytest.raises(ValueError, match="exactly one of sources"):
        normgate.Implementation("k", fp64_step)
    with pytest.raises(ValueError, match="source_sha256: 'xyz'"):
        normgate.Implementation("k", fp64_step, source_sha256="xyz")
    with pytest.raises(ValueError, match="op: 'both'"):
        normgate.Implementation("k", fp64_step, op="both", source_sha256="ab" * 32)
    with pytest.raises(ValueError, match="deterministic=False with op='fwd'"):
        normgate.Implementation("k", fp64_step, op="fwd", deterministic=False, source_sha256="ab" * 32)
    with pytest.raises(ValueError, match="w: 'fp16'"):
        normgate.Implementation("k", fp64_step, w="fp16", source_sha256="ab" * 32)
    with pytest.raises(ValueError, match="is not a file or directory"):
        normgate.Implementation("k", fp64_step, sources=[str(tmp_path / "missing.cu")])
    impl = normgate.Implementation("py_args", fp64_step, source_sha256="ab" * 32, device="cpu")
    out = tmp_path / "out"
    out.mkdir()
    win = [{"H": 64, "T": (1, 4)}]
    with pytest.raises(ValueError, match="t_per_window = 1"):
        normgate.gate(impl, windows=win, t_per_window=1, journal=str(out / "j"))
    with pytest.raises(ValueError, match=r"windows\[0\] needs H and T"):
        normgate.gate(impl, windows=[{"H": 64}], journal=str(out / "j"))
    with pytest.raises(ValueError, match=r"windows\[0\] T: '5..x'"):
        normgate.gate(impl, windows=["H=64,T=5..x"], journal=str(out / "j"))
    with pytest.raises(ValueError, match="not both or neither"):
        normgate.gate(impl, table=str(out / "t.toml"), windows=win)
    with pytest.raises(ValueError, match="does not exist"):
        normgate.gate(impl, windows=win, journal=str(tmp_path / "nowhere" / "j"))
    with pytest.raises(ValueError, match="does not support window H=128"):
        normgate.gate(normgate.Implementation("py_h64", fp64_step, H=64, source_sha256="ab" * 32, device="cpu"),
                      windows=[{"H": 128, "T": 4}], journal=str(out / "j"))
    with pytest.raises(TypeError, match="impls\\[0\\] is str"):
        normgate.gate(["bwd_det_chunked"], windows=win)
    with pytest.raises(ValueError, match="backend: 'tpu'"):
        normgate.gate(impl, windows=win, backend="tpu")
    # A built-in variant's name is refused by the library, naming it.
    with pytest.raises(ValueError, match="built-in"):
        normgate.gate(normgate.Implementation("bwd_det_chunked", fp64_step, source_sha256="ab" * 32, device="cpu"),
                      windows=win, table_out=str(out / "t.toml"))
    with pytest.raises(ValueError, match="device: 'tpu'"):
        normgate.Implementation("k", fp64_step, source_sha256="ab" * 32, device="tpu")
    # A seed set with characters no seed set has: refused before the table and
    # policy are written (a quote would have broken the policy file).
    with pytest.raises(ValueError, match="seeds '3x1\"' is not a seed set"):
        normgate.gate(impl, windows=win, journal=str(out / "j"), approve=True, seeds='3x1"')
    # A path C would read shorter (a NUL inside), or a filter with a lone surrogate: refused before any work.
    with pytest.raises(ValueError, match="journal .* contains a NUL"):
        normgate.gate(impl, windows=win, journal=str(out / "j.journal") + "\0evil")
    with pytest.raises(ValueError, match="report_md .* contains a NUL"):
        normgate.gate(impl, windows=win, journal=str(out / "j"), report_md=str(out / "r.md") + "\0x")
    # A seed set the library refuses ("1x1": neither the 3 nor the 5 families),
    # a repeated window key, a digit that is not ASCII, a report path that is
    # a folder, a CUDA device that is not there: refused before any work.
    with pytest.raises(ValueError, match="seed set '1x1'"):
        normgate.gate(impl, windows=win, journal=str(out / "j"), approve=True, seeds="1x1")
    with pytest.raises(ValueError, match=r"windows\[0\]: H given twice \('64' and '128'\)"):
        normgate.gate(impl, windows=["H=64,T=1..4,H=128"], journal=str(out / "j"))
    with pytest.raises(ValueError, match=r"windows\[0\] H: '\u0663' is not a whole number"):
        normgate.gate(impl, windows=[{"H": "\u0663", "T": 4}], journal=str(out / "j"))
    with pytest.raises(ValueError, match=r"windows\[0\] H: '\\u200364' is not a whole number"):
        normgate.gate(impl, windows=["H=\u200364,T=4"], journal=str(out / "j"))
    with pytest.raises(ValueError, match=r"windows\[0\] T: '\xb2' is not N or A..B"):
        normgate.gate(impl, windows=[{"H": 64, "T": "\xb2"}], journal=str(out / "j"))
    folder = tmp_path / "a_folder"
    folder.mkdir()
    with pytest.raises(ValueError, match="report_json .* is a folder"):
        normgate.gate(impl, windows=win, journal=str(out / "j"), report_json=str(folder))
    far = normgate.Implementation("py_far", fp64_step, source_sha256="ab" * 32, device="cuda:99")
    with pytest.raises(ValueError, match="device 'cuda:99' is not present"):
        normgate.gate(far, windows=win, journal=str(out / "j"))
    assert os.listdir(out) == []  # nothing written: no table, journal, report or approvals
    with pytest.raises(TypeError, match="forms must be a name or a list of names"):
        normgate.Implementation("k", fp64_step, forms=5, source_sha256="ab" * 32)
    with pytest.raises(ValueError, match="description must be one line of text without control characters"):
        normgate.Implementation("k", fp64_step, description="x\ry", source_sha256="ab" * 32)
    # A table_out that normgate.gate() did not write is never overwritten.
    mine = tmp_path / "mine.toml"
    mine.write_text("# my own table\n")
    with pytest.raises(ValueError, match="was not written by normgate.gate"):
        normgate.gate(impl, windows=win, table_out=str(mine))
    assert mine.read_text() == "# my own table\n"


@pytest.mark.skipif(not torch.cuda.is_available() or not normgate.device_available(),
                    reason="needs a CUDA device (torch and libnormgate_capi.so built with CUDA)")
def test_cuda_callable_beside_a_gpu_variant(tmp_path):
    """On a GPU: the callable gets CUDA tensors, and a table routing a built-in
    GPU variant in another window gates both in one campaign."""
    seen = set()

    def step(g):
        seen.add(g["x"].device.type)
        return fp64_step(g)

    impl = normgate.Implementation("py_cuda_fp64", step, source_sha256="ef" * 32, deterministic=False)
    table = tmp_path / "t.toml"
    table.write_text('arch = "sm90a"\ndescription = "gpu mix"\nroute = [\n'
                     '  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [1, 40], '
                     'variant = "bwd_det_chunked" },\n'
                     '  { op = "bwd", mode = "nondet", H = 64, w = "bf16", form = "plain", T = [1, 40], '
                     'variant = "py_cuda_fp64" },\n]\n')
    rep = normgate.gate(impl, table=str(table), backend="gpu", **SMALL)
    assert rep["verdict"] == "PASS", rep["markdown"]
    assert rep["backend"] == "gpu"
    assert seen == {"cuda"}
    assert rep["externals"][0]["ran_on"] == "python callable on cuda"


def test_progress_bar_rate_counts_only_cases_run_while_it_is_up():
    """A resumed gate reports thousands of cases done at its first report: the
    bar starts there (tqdm's initial), so its rate is the cases run since."""
    import importlib

    g = importlib.import_module("normgate.gate")

    made = []

    class FakeTqdm:
        def __init__(self, total, initial=0, **kw):
            self.total, self.initial, self.n, self.updates = total, initial, initial, []
            self.draws = 0
            made.append(self)

        def update(self, k):  # tqdm's update draws the bar (at most every mininterval)
            self.updates.append(k)
            self.n += k
            self.draws += 1

        def set_postfix_str(self, s, refresh=True):
            self.postfix = s
            self.draws += refresh

        def refresh(self):
            self.draws += 1

        def close(self):
            pass

    def report(phase, done, total):
        p = g._Progress()
        p.phase, p.done, p.total, p.worst = phase, done, total, 0.25
        return p

    bar = g._Bar(True)
    bar.tqdm = FakeTqdm
    bar.update(report(b"grid", 900, 1000))  # 900 resumed from the journal
    bar.update(report(b"grid", 903, 1000))
    bar.update(report(b"grid", 903, 1000))  # no new case: no update
    bar.update(report(b"refine", 2, 40))     # a new phase: a new bar
    assert [(b.total, b.initial, b.n, b.updates) for b in made] == [(1000, 900, 903, [3]), (40, 2, 2, [])]
    assert made[0].postfix == "worst err/tol 0.25"
    # One draw per report (each update's bar once in a log, not twice).
    assert [b.draws for b in made] == [3, 1]


def test_retry_errors_runs_journalled_errors_again(tmp_path, capsys):
    # A callable that raises once (an out-of-memory on a busy GPU): the case
    # is journalled as an error and stays so on resume; retry_errors=True
    # runs it (and only it) again, after which the window passes.
    calls = {"n": 0}

    def flaky(g):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected: CUDA out of memory")
        return fp64_step(g)

    impl = normgate.Implementation("py_flaky", flaky, source_sha256="ab" * 32, device="cpu")
    args = dict(windows=[{"H": 64, "T": (1, 8)}], journal=str(tmp_path / "j"), **SMALL)
    rep = normgate.gate(impl, **dict(args, progress=True))
    (w,) = rep["windows"]
    assert rep["verdict"] != "PASS" and w["errors"] == 1
    said = capsys.readouterr().err  # the verdict's reason and the way out, not only the report's
    assert "1 case(s) threw" in said and "injected: CUDA out of memory" in said and "retry_errors=True" in said
    n = calls["n"]
    rep = normgate.gate(impl, **args)
    assert rep["verdict"] != "PASS" and rep["journal"]["run_now"] == 0 and calls["n"] == n
    rep = normgate.gate(impl, retry_errors=True, **args)
    assert rep["verdict"] == "PASS", rep["markdown"]
    assert rep["journal"]["run_now"] == 1 and rep["journal"]["retried"] == 1
    assert calls["n"] == n + 2  # the one case, run twice (a deterministic implementation)
    rep = normgate.gate(impl, **args)
    assert rep["verdict"] == "PASS" and rep["journal"]["run_now"] == 0
    # A case that errored in this run is journalled once: the dense grid
    # does not step onto a grid T again (T = 5 here; tests/gate's
    # External.AnErrorOfThisRunIsNotRunAgainByALaterPhase covers a later
    # phase that needs an errored case).
    def broken_at_5(g):
        if g["T"] == 5:
            raise RuntimeError("injected: always fails at T = 5")
        return fp64_step(g)

    bad = normgate.Implementation("py_t5", broken_at_5, source_sha256="ab" * 32, device="cpu")
    j2 = str(tmp_path / "j2")
    rep = normgate.gate(bad, windows=[{"H": 64, "T": (1, 8)}], journal=j2, retry_errors=True,
                        **dict(SMALL, dense_step=2))
    assert rep["journal"]["retried"] == 0 and rep["windows"][0]["errors"] >= 1
    grid, dense = rep["windows"][0]["grid"]["t"], rep["windows"][0]["dense"]
    assert not set(grid) & set(dense["t"]), dense
    assert {dense["center"] - 2, dense["center"] + 2} & set(grid), (grid, dense)  # a step landed on the grid
    with open(j2) as f:
        lines = [json.loads(x) for x in f.read().splitlines()[1:]]
    assert len({x["case"] for x in lines}) == len(lines), "a case journalled twice in one run"
    with pytest.raises(ValueError, match="retry_errors=True needs journal="):
        normgate.gate(impl, windows=args["windows"], retry_errors=True, **SMALL)
    with pytest.raises(TypeError, match="retry_errors must be a bool"):
        normgate.gate(impl, retry_errors=1, **args)


def test_a_gate_from_a_step_is_refused_before_it_registers(tmp_path):
    # A second gate() while one runs (from a step, as another thread could)
    # registered its implementation over the running one's first: the
    # running campaign ran the other function under the first's name.
    seen = {"inner": None, "calls": 0}

    def wrong(g):
        out = fp64_step(g)
        out["dw"] = out["dw"] * 2
        return out

    def step(g):
        seen["calls"] += 1
        if seen["calls"] == 1:
            try:
                normgate.gate(normgate.Implementation("py_nest", wrong, source_sha256="cd" * 32, device="cpu"),
                              windows=[{"H": 64, "T": (1, 8)}], table_out=str(tmp_path / "inner.toml"), **SMALL)
            except RuntimeError as e:
                seen["inner"] = str(e)
        return fp64_step(g)

    impl = normgate.Implementation("py_nest", step, source_sha256="ab" * 32, device="cpu")
    rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 8)}], table_out=str(tmp_path / "t.toml"), **SMALL)
    assert seen["inner"] and "already running in this process" in seen["inner"], seen
    assert rep["verdict"] == "PASS", rep["markdown"]  # every case ran `step`, none `wrong`
    assert not (tmp_path / "inner.toml").exists()


def test_a_long_non_ascii_or_unprintable_error_is_the_cases_error(tmp_path):
    # The error buffer was cut mid-character (the report then was invalid
    # JSON and no report came back), and an exception whose str() raises
    # reached the library as a garbage return code.
    class BadStr(Exception):
        def __str__(self):
            raise RuntimeError("str fails")

    def utf8(g):
        raise ValueError("\u00e9" * 3000)

    def badstr(g):
        raise BadStr()

    for name, fn, said in (("py_utf8", utf8, "ValueError: \u00e9\u00e9"),
                           ("py_badstr", badstr, "BadStr (its message could not be formatted)")):
        impl = normgate.Implementation(name, fn, source_sha256="ab" * 32, device="cpu")
        rep = normgate.gate(impl, windows=[{"H": 64, "T": (1, 4)}], table_out=str(tmp_path / (name + ".toml")),
                            **SMALL)
        (w,) = rep["windows"]
        assert rep["verdict"] != "PASS" and w["errors"] == w["cases"] > 0, rep["markdown"]
        assert said in w["error_samples"][0], w["error_samples"][0][:300]


def test_a_table_that_routes_nothing_to_the_implementation_is_refused(tmp_path):
    # gate(impl, table=T) with T routing only other variants ran none of
    # impl's cases and said PASS (the table's other windows passed).
    calls = {"n": 0}

    def step(g):
        calls["n"] += 1
        return fp64_step(g)

    impl = normgate.Implementation("py_unrouted", step, source_sha256="ab" * 32, device="cpu")
    table = tmp_path / "t.toml"
    table.write_text('arch = "sm90a"\ndescription = "x"\nroute = [\n'
                     '  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [1, 8], '
                     'variant = "bwd_det_chunked" },\n]\n')
    with pytest.raises(ValueError, match="the table routes no window to external implementation 'py_unrouted'"):
        normgate.gate(impl, table=str(table), **SMALL)
    assert calls["n"] == 0
    # The library reads the table as parsed (a regex over its text took a
    # comment naming the implementation: PASS with no call; adversarial
    # pass). One routed only in windows the filter leaves out is taken and
    # not run: a table routing two implementations is gated one part at a
    # time so (the table cannot load without both).
    table.write_text('arch = "sm90a"\ndescription = "x"\n# variant = "py_unrouted"\nroute = [\n'
                     '  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [1, 8], '
                     'variant = "bwd_det_chunked" },\n]\n')
    with pytest.raises(ValueError, match="the table routes no window to external implementation 'py_unrouted'"):
        normgate.gate(impl, table=str(table), **SMALL)
    table.write_text('arch = "sm90a"\ndescription = "x"\nroute = [\n'
                     '  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [1, 8], '
                     'variant = "bwd_det_chunked" },\n'
                     '  { op = "bwd", mode = "det", H = 128, w = "bf16", form = "plain", T = [1, 8], '
                     'variant = "py_unrouted" },\n]\n')
    part = normgate.gate(impl, table=str(table), windows="H=64", **SMALL)
    assert part["pass"] and calls["n"] == 0 and not part["externals"], part["externals"]
    # table_out= is for windows=: with table= it would be ignored.
    with pytest.raises(ValueError, match="table_out=.* goes with windows="):
        normgate.gate(impl, table=str(table), table_out=str(tmp_path / "mine.toml"), **SMALL)
    # An implementation registered by an earlier gate() of this process is
    # not run by a later gate it was not given to (it ran, under its name).
    other = normgate.Implementation("py_other_routed", fp64_step, source_sha256="ab" * 32, device="cpu")
    normgate.gate(impl, windows=[{"H": 128, "T": (1, 8)}], **SMALL)
    n = calls["n"]
    assert n > 0
    with pytest.raises(ValueError, match="routed to external implementation py_unrouted, which this gate was not "
                                         "given"):
        normgate.gate(other, table=str(table), **SMALL)
    assert calls["n"] == n
    # A seed set the library takes is taken ('+' in a kappa was refused here).
    assert normgate.gate(impl, windows=[{"H": 128, "T": (1, 8)}], **dict(SMALL, seeds="cancel,kappa=1e+4:0..0"))["pass"]
    # A table_out whose folder cannot take a file: ValueError naming it (a
    # raw OSError named only the temporary file).
    with pytest.raises(ValueError, match="cannot write table_out '/proc/normgate-t.toml': folder '/proc'"):
        normgate.gate(impl, windows=[{"H": 128, "T": (1, 8)}], table_out="/proc/normgate-t.toml", **SMALL)
