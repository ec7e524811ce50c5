"""The ctypes mirror of capi.h (python/normgate/_lib.py) and the library
loader, without torch: struct layouts (the same offsets tests/capi/capi_test.cpp
pins on the C side), version, case info, and error mapping.

Runs under pytest, or alone (`python3 python/tests/test_abi.py`, as ctest's
python_capi test does, with NORMGATE_LIB set); prints "N passed, N failed".
"""

import ctypes
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from normgate import _lib  # noqa: E402
import normgate  # noqa: E402

# (struct, size, {field: offset}) as in capi.h on x86-64 / aarch64 Linux.
LAYOUTS = [
    (_lib.FwdArgs, 152, {"variant": 0, "x": 8, "x_stride_h": 24, "w_dtype": 40, "form": 44, "y": 48, "rstd": 72,
                         "T": 80, "heads": 96, "eps": 104, "u": 112, "h_new_stride": 136, "msq": 144}),
    (_lib.BwdArgs, 168, {"dy": 0, "x": 24, "w_dtype": 56, "form": 60, "rstd": 64, "dw": 96, "T": 104,
                         "workspace": 128, "workspace_bytes": 136, "dh_new_stride": 152, "msq": 160}),
    (_lib.CaseInfo, 336, {"form": 32, "eps": 40, "seed": 56, "family": 64, "canonical": 80}),
    (_lib.HostInputs, 80, {"dh_new_elems": 72}),
    (_lib.Outputs, 80, {"h_new_elems": 72}),
]


def test_struct_layouts_match_the_c_header():
    for cls, size, offsets in LAYOUTS:
        assert ctypes.sizeof(cls) == size, (cls.__name__, ctypes.sizeof(cls), size)
        for field, off in offsets.items():
            assert getattr(cls, field).offset == off, (cls.__name__, field, getattr(cls, field).offset, off)


def test_loader_version_case_info_and_errors():
    assert os.path.exists(normgate.library_path()), normgate.library_path()
    assert normgate.version().startswith("normgate ")
    assert normgate.device_available() in (True, False)
    info = normgate.case_info("H=256,T=3,w=bf16,form=heads24,family=cancel,seed=1")
    assert (info["heads"], info["rows"], info["form"], info["w"]) == (24, 72, "heads24", "bf16")
    assert info["case"] == "H=256,T=3,w=bf16,form=heads24,family=cancel,seed=1"
    try:
        normgate.case_info("H=64,T=3,w=bf16,form=plain,family=normal,seed=x")
    except ValueError as e:
        assert "seed" in str(e), str(e)
    else:
        raise AssertionError("a bad case id must raise ValueError")
    try:
        _lib.bwd_workspace_bytes("bwd_bogus", 10, 64)
    except ValueError as e:
        assert "bwd_bogus" in str(e), str(e)
    else:
        raise AssertionError("an unknown variant must raise ValueError")
    # nondet: 8 FP64 replicas per column where chunks are long; the det partials where short
    assert _lib.bwd_workspace_bytes("bwd_nondet_atomic", 131072, 4096) == 8 * 4096 * 8
    assert _lib.bwd_workspace_bytes("bwd_nondet_atomic", 10, 64) == 1 * 64 * 8  # one chunk of 10 rows
    # ctypes would take 2**64 as 0 rows, 256.9 as 256 and True as 1: refused, naming the value
    for rows, H, said in ((2 ** 64, 4096, "T_rows = 18446744073709551616 does not fit in 64 bits"),
                          (2 ** 64 + 100000, 4096, "T_rows = 18446744073709651616 does not fit"),
                          (100, 256.9, "H must be an integer, got 256.9"),
                          (True, 256, "T_rows must be an integer, got True"),
                          (8.7, 256, "T_rows must be an integer, got 8.7")):
        try:
            normgate.bwd_workspace_bytes(rows, H, variant="bwd_det_wreg")
        except ValueError as e:
            assert said in str(e), str(e)
        else:
            raise AssertionError("bwd_workspace_bytes(%r, %r) must raise ValueError" % (rows, H))
    assert normgate.bwd_workspace_bytes(100000, 4096, variant="bwd_det_wreg") == \
        _lib.bwd_workspace_bytes("bwd_det_chunked", 100000, 4096)


def _raises(f, *args, **kwargs):
    """The exception f(*args, **kwargs) raises (AssertionError when none)."""
    try:
        f(*args, **kwargs)
    except Exception as e:  # noqa: BLE001  the caller checks its type and message
        return e
    raise AssertionError("%s%r accepted" % (f.__name__, args))


def test_eps_rule_at_the_python_entry_points():
    # The normal float32 range: what the kernels take as float32(eps) without
    # turning it into 0 (1e-50: an all-zero row's y NaN) or a subnormal (1e-45).
    assert normgate.EPS_MIN == 1.1754943508222875e-38 == ctypes.c_float(normgate.EPS_MIN).value
    assert normgate.EPS_MAX == 3.4028234663852886e+38 == ctypes.c_float(normgate.EPS_MAX).value
    # The kernel call: a ValueError naming the value before anything else (no
    # torch, no tensors needed to see it).
    for eps, there in ((1e-50, "(0 there)"), (1e-45, "(a subnormal 1.401298464324817e-45 there)"),
                       (-1e-6, ""), (float("inf"), ""), (1e39, "")):
        e = _raises(normgate.rmsnorm_train_forward, None, None, eps=eps)
        assert isinstance(e, ValueError), repr(e)
        assert ("eps = %r is outside 1.1754943508222875e-38..3.4028234663852886e+38" % eps) in str(e), str(e)
        assert there in str(e), str(e)
    # Just outside the range but rounding to the bounds in float32: refused,
    # and not called a subnormal (float32 of it is EPS_MIN / EPS_MAX itself).
    for eps, words in ((1.1754943e-38, "rounds up to EPS_MIN"), (3.4028235e38, "rounds down to EPS_MAX")):
        e = _raises(normgate.rmsnorm_train_forward, None, None, eps=eps)
        assert isinstance(e, ValueError) and words in str(e) and "subnormal" not in str(e), str(e)
    # A valid tiny eps and the default pass the eps check (what fails then is x).
    for eps in (normgate.EPS_MIN, 1e-6):
        e = _raises(normgate.rmsnorm_train_forward, None, None, eps=eps)
        assert "eps" not in str(e), str(e)
        assert normgate._check_eps(eps) == eps
    e = _raises(normgate.rmsnorm_train_forward, None, None)
    assert "eps" not in str(e), str(e)
    # Case ids (the generator, the oracle, check): the library's rule, as a ValueError.
    base = "H=64,T=3,w=bf16,form=plain,family=epsnear,seed=0"
    for eps, words in (("1e-50", "which is 0 there"), ("1e-45", "a subnormal 1.401298464324817e-45 there")):
        e = _raises(normgate.case_info, base + ",eps=" + eps)
        assert isinstance(e, ValueError), repr(e)
        assert "eps=" + eps + " is below the smallest normal float32 1.1754943508222875e-38" in str(e), str(e)
        assert words in str(e), str(e)
    assert normgate.case_info(base + ",eps=1.1754943508222875e-38")["eps"] == normgate.EPS_MIN
    assert normgate.case_info(base)["eps"] == 1e-6


def test_import_needs_no_torch():
    pkg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    env = dict(os.environ, PYTHONPATH=pkg)
    code = "import sys, normgate; normgate.version(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


if __name__ == "__main__":
    from plain_runner import run_module_tests  # python/tests/, on sys.path as the script's folder

    run_module_tests(globals())
