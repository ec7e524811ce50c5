"""Which kernel a Python call runs, without torch or a GPU: normgate.route_for
over tests/data/routes/dispatch.toml with approvals written beside a copy of
it (current for the bf16 windows, stale for bwd det fp32, none for bwd nondet
fp32), the window edge, refusals, overrides, strict mode, load_routes and
NORMGATE_DISPATCH. The kernel calls themselves (last_variant) are tested with
torch on a GPU in test_normgate.py.

Runs under pytest, or alone (`python3 python/tests/test_dispatch.py`, as
ctest's python_dispatch test does, with NORMGATE_LIB set); prints "N passed,
N failed".
"""

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import normgate  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TABLE = os.path.join(REPO, "tests", "data", "routes", "dispatch.toml")

# The routes of dispatch.toml: (op, mode, w, lo, hi, variant); H = 64, form plain.
ROUTES = [
    ("fwd", None, "bf16", 1, 700, "fwd_rowwise"),
    ("bwd", "det", "bf16", 1, 700, "bwd_det_chunked"),
    ("bwd", "nondet", "bf16", 1, 100, "bwd_det_chunked"),
    ("bwd", "nondet", "bf16", 101, 700, "bwd_nondet_atomic"),
    ("bwd", "det", "fp32", 1, 700, "bwd_det_chunked"),
    ("bwd", "nondet", "fp32", 1, 700, "bwd_nondet_atomic"),
]


def make_table(d):
    """dispatch.toml copied into d with its approvals; returns the table's path."""
    path = os.path.join(d, "dispatch.toml")
    shutil.copy(TABLE, path)
    recs = []
    for op, mode, w, lo, hi, var in ROUTES:
        if w == "fp32" and mode == "nondet":
            continue  # missing
        win = {"op": op, "H": 64, "w": w, "form": "plain", "T": [lo, hi]}
        if mode:
            win["mode"] = mode
        sha = "e" * 64 if w == "fp32" else normgate.variant_info(var)["source_sha256"]  # fp32: stale
        err = {"y": 0.3, "rstd": 0.01} if op == "fwd" else {"y": 0.3, "rstd": 0.01, "dx": 0.4, "dw": 0.02}
        rec = {"window": win, "variant": var, "source_sha256": sha, "backend": "gpu", "gpu": "NVIDIA H200",
               "driver": "580.159.04", "cuda": "13.0", "seed_set": "3x16", "t_points": [lo, hi], "cases": 96,
               "max_err_tol": err, "worst_case": "H=64,T=%d,w=%s,form=plain,family=normal,seed=0" % (lo, w),
               "date": "2026-12-01T00:00:00Z", "normgate_commit": "test", "normgate_version": "0.2.0"}
        # record_sha256 (routing.h, "Validation"): SHA-256 of the record's
        # compact dump with sorted keys (what nlohmann::json::dump() gives
        # for these ASCII strings and short decimals).
        canon = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        rec["record_sha256"] = hashlib.sha256(canon.encode()).hexdigest()
        recs.append(rec)
    with open(os.path.join(d, "dispatch.approvals.json"), "w") as f:
        json.dump({"format": "normgate-approvals/1", "approvals": recs}, f)
    return path


class Routes:
    """The test table loaded for a block; the default search afterwards."""

    def __init__(self, dispatch_env=None):
        self.env = dispatch_env

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="normgate_dispatch_")
        self.table = make_table(self.dir)
        if self.env is None:
            os.environ.pop("NORMGATE_DISPATCH", None)
        else:
            os.environ["NORMGATE_DISPATCH"] = self.env
        assert normgate.load_routes(self.table) == self.table
        normgate.set_strict_routes(False)
        return self

    def __exit__(self, *exc):
        os.environ.pop("NORMGATE_DISPATCH", None)
        normgate.set_strict_routes(False)
        normgate.load_routes()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


def raises(exc, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        return str(e)
    raise AssertionError("expected %s from %s%r" % (exc.__name__, fn.__name__, args))


def test_route_for_changes_at_the_window_edge():
    with Routes() as r:
        lo = normgate.route_for("bwd", 64, 100, "bf16", deterministic=False)
        assert lo["variant"] == "bwd_det_chunked", lo
        assert (lo["how"], lo["approval"], lo["window"], lo["table"]) == ("routed", "current", (1, 100), r.table), lo
        assert lo["refused"] is None and lo["deterministic"] is False
        assert lo["workspace_bytes"] == normgate.bwd_workspace_bytes(100, 64, variant="bwd_det_chunked")
        hi = normgate.route_for("bwd", 64, 101, "bf16", deterministic=False)
        assert (hi["variant"], hi["window"]) == ("bwd_nondet_atomic", (101, 700)), hi
        assert hi["workspace_bytes"] == normgate.bwd_workspace_bytes(101, 64, variant="bwd_nondet_atomic")
        # det: one window; T = 0: the window of T = 1, no workspace.
        assert normgate.route_for("bwd", 64, 101, "bf16")["variant"] == "bwd_det_chunked"
        zero = normgate.route_for("bwd", 64, 0, "bf16", deterministic=False)
        assert (zero["variant"], zero["window"], zero["workspace_bytes"]) == ("bwd_det_chunked", (1, 100), 0)
        f = normgate.route_for("fwd", 64, 700, "torch.bfloat16")
        assert (f["variant"], f["op"], f["deterministic"], f["workspace_bytes"]) == ("fwd_rowwise", "fwd", None, 0)
        assert "op must be" in raises(ValueError, normgate.route_for, "both", 64, 1)
        assert "w_dtype" in raises(ValueError, normgate.route_for, "bwd", 64, 1, "fp16")
        assert "form must be" in raises(ValueError, normgate.route_for, "bwd", 64, 1, "bf16", "rows")
        assert "T < 0" in raises(ValueError, normgate.route_for, "bwd", 64, -1)
        # ctypes would truncate 2048.9 to 2048: a float H or T is refused, naming it
        assert "H must be an integer, got 64.5" in raises(ValueError, normgate.route_for, "bwd", 64.5, 1)
        assert "T must be an integer, got 100.0" in raises(ValueError, normgate.route_for, "bwd", 64, 100.0)
        assert "T must be an integer, got True" in raises(ValueError, normgate.route_for, "bwd", 64, True)
        assert "T = 1180591620717411303424 does not fit" in raises(ValueError, normgate.route_for, "bwd", 64, 2 ** 70)
        assert "deterministic must be True or False" in raises(ValueError, normgate.route_for, "bwd", 64, 1,
                                                               deterministic="no")
        assert "form must be one of" in raises(ValueError, normgate.route_for, "bwd", 64, 1, "bf16", ["plain"])
        assert "op must be" in raises(ValueError, normgate.route_for, ["fwd"], 64, 1)
        assert "variant must be a variant name or None, got ''" in raises(ValueError, normgate.route_for, "bwd", 64, 1,
                                                                          variant="")
        assert "deterministic must be True or False" in raises(ValueError, normgate.bwd_workspace_bytes, 8, 64,
                                                               deterministic="no")
        assert "variant must be a variant name or None" in raises(ValueError, normgate.bwd_workspace_bytes, 8, 64,
                                                                  variant="")


def test_missing_and_stale_approvals_are_refused_naming_the_window():
    with Routes() as r:
        s = normgate.route_for("bwd", 64, 5, "fp32")
        assert (s["how"], s["approval"], s["variant"]) == ("refused", "stale", "bwd_det_chunked"), s
        assert "window bwd det H=64 w=fp32 form=plain T=1..700" in s["refused"], s
        assert "stale: approved source eeeeeeeeeeee" in s["refused"], s
        assert os.path.join(r.dir, "dispatch.approvals.json") in s["refused"], s
        assert 'variant="...")' in s["refused"], s
        m = normgate.route_for("bwd", 64, 700, "fp32", deterministic=False)
        assert (m["how"], m["approval"]) == ("refused", "missing"), m
        assert "missing: no approval for this window and variant" in m["refused"], m
        # The internal check a kernel call makes first raises RouteError.
        msg = raises(normgate.RouteError, normgate._route, "bwd", 64, 5, 1, "plain", True, None)
        assert "bwd det H=64 w=fp32 form=plain T=5: window" in msg, msg


def test_overrides_by_name_and_by_policy():
    with Routes():
        e = normgate.route_for("bwd", 64, 5, "fp32", variant="bwd_det_chunked")
        assert (e["how"], e["variant"], e["approval"]) == ("explicit", "bwd_det_chunked", "stale"), e
        assert "non-deterministic" in raises(ValueError, normgate.route_for, "bwd", 64, 5, "fp32",
                                             variant="bwd_nondet_atomic")
        assert "negative control" in raises(ValueError, normgate.route_for, "bwd", 64, 5, "fp32",
                                            variant="ctl_fp32_seq")
        # A name C would read shorter (an embedded NUL), or with no UTF-8 spelling: ValueError naming it
        assert "variant 'bwd_det_chunked\\x00x' contains a NUL" in raises(
            ValueError, normgate.route_for, "bwd", 64, 5, "fp32", variant="bwd_det_chunked\0x")
        assert "is not valid Unicode text" in raises(ValueError, normgate.route_for, "bwd", 64, 5, "fp32",
                                                     variant="bwd_\ud800")
        assert "contains a NUL" in raises(ValueError, normgate.bwd_workspace_bytes, 8, 64, variant="bwd_det_chunked\0")
        # The C ABI's limits in tokens: T*heads rows up to 2^32, heads of 256
        assert "T = 178956971 is out of range 0..178956970" in raises(
            ValueError, normgate.route_for, "bwd", 256, 178956971, "bf16", "heads24")
        assert "normalizes heads of 256" in raises(ValueError, normgate.route_for, "fwd", 128, 5, "bf16", "heads4")
        assert normgate._variant_for("bwd_nondet_atomic", "bwd") == "bwd_nondet_atomic"
        assert normgate._variant_for("bwd_nondet_atomic", "fwd") is None
        assert normgate._variant_for({"fwd": "fwd_rowwise"}, "bwd") is None
        assert "variant dict keys" in raises(ValueError, normgate._variant_for, {"dx": "x"}, "bwd")
    with Routes("allow-unapproved"):
        u = normgate.route_for("bwd", 64, 5, "fp32")
        assert (u["how"], u["variant"], u["approval"]) == ("unapproved", "bwd_det_chunked", "stale"), u
    # An unknown policy token: RouteError at load, the table in use stays.
    with Routes() as r:
        os.environ["NORMGATE_DISPATCH"] = "yes-please"
        assert "unknown token 'yes-please'" in raises(normgate.RouteError, normgate.load_routes, r.table)
        os.environ.pop("NORMGATE_DISPATCH")
        assert normgate.route_for("bwd", 64, 5)["table"] == r.table


def test_fallback_and_strict_mode():
    import warnings
    with Routes() as r:
        fb = normgate.route_for("bwd", 128, 5, "bf16", deterministic=False)
        assert (fb["how"], fb["variant"], fb["approval"], fb["window"]) == ("fallback", "bwd_nondet_atomic", None,
                                                                             None), fb
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for T in (5, 6, 9000):  # one warning per (op, mode, H, w, form)
                normgate._route("bwd", 128, T, 0, "plain", False, None)
            normgate._route("bwd", 128, 5, 0, "plain", True, None)  # det: another group
        texts = [str(w.message) for w in caught if issubclass(w.category, normgate.RouteWarning)]
        assert len(texts) == 2, texts
        assert "bwd nondet H=128 w=bf16 form=plain (T=5) is outside every window of " + r.table in texts[0], texts
        assert "fallback bwd_nondet_atomic" in texts[0] and "bwd det H=128" in texts[1], texts
        normgate.set_strict_routes(True)
        s = normgate.route_for("bwd", 128, 5, "bf16", deterministic=False)
        assert s["how"] == "refused" and "strict routes are on" in s["refused"], s
        assert "strict routes" in raises(normgate.RouteError, normgate._route, "bwd", 128, 5, 0, "plain", False, None)
        # An explicit variant still serves it.
        assert normgate.route_for("bwd", 128, 5, variant="bwd_det_chunked")["how"] == "explicit"
        normgate.set_strict_routes(False)
        assert normgate.route_for("bwd", 128, 5)["how"] == "fallback"


def test_strict_routes_and_load_routes_refuse_a_bad_argument_naming_it():
    with Routes() as r:
        # Any non-empty string is truthy: "false" used to turn strict mode on.
        for bad in ("false", "no", 1, 0, None, [True]):
            msg = raises(ValueError, normgate.set_strict_routes, bad)
            assert "set_strict_routes: on must be True or False, got %r" % (bad,) in msg, msg
            fb = normgate.route_for("bwd", 128, 5, "bf16", deterministic=False)
            assert fb["how"] == "fallback", (bad, fb)  # strict mode stayed off
        # "" used to load the default table silently; 5 gave a TypeError naming no parameter.
        assert "load_routes: path is empty ('')" in raises(ValueError, normgate.load_routes, "")
        for bad in (5, b"/x/y.toml", ["t.toml"]):
            msg = raises(ValueError, normgate.load_routes, bad)
            assert "load_routes: path must be a str, an os.PathLike or None, got %r" % (bad,) in msg, msg
        assert normgate.route_for("bwd", 64, 5)["table"] == r.table  # the table in use stayed
        # A PathLike is a path.
        import pathlib
        assert normgate.load_routes(pathlib.Path(r.table)) == r.table


def test_a_refusal_by_the_library_does_not_name_its_c_entry_point():
    # The library's messages begin with their C entry point ("ng_route_for:
    # ..."), which a Python caller never called: check() leaves it out and
    # keeps the message, which names the bad value.
    with Routes():
        msg = raises(ValueError, normgate.route_for, "fwd", -1, 5)
        assert msg.startswith("fwd H=-1 w=bf16 form=plain T=5: H = -1 outside 1..16384"), msg
        assert "ng_" not in msg, msg


def test_default_table_is_the_shipping_one():
    saved = os.environ.pop("NORMGATE_ROUTES", None)
    try:
        path = normgate.load_routes()  # the build tree's routes/ or the installed share/normgate/routes/
        # sm90a.toml, or on a GPU with a table of its own its sm90a@SLUG.toml (capi.h)
        assert re.fullmatch(r"sm90a(@[a-z0-9]+(-[a-z0-9]+)*)?\.toml", os.path.basename(path)), path
        r = normgate.route_for("bwd", 2048, 70000, "bf16", deterministic=False)
        lo, hi = r["window"]  # the table is derived: the window holding the call
        assert lo <= 70000 <= hi and r["table"] == path and r["approval"] == "current", r
    finally:
        if saved is not None:
            os.environ["NORMGATE_ROUTES"] = saved


if __name__ == "__main__":
    from plain_runner import run_module_tests  # python/tests/, on sys.path as the script's folder

    run_module_tests(globals())
