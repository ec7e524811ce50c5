"""tools/gate_peers.py's summary stays JSON: normgate.gate returns a
non-finite err/tol as a float (a peer whose dw is NaN), which json.dump
would write as Infinity or NaN; the summary spells it as the reports do.
Runs under pytest or as `python3 tests/tools/test_gate_peers.py` (no torch
needed: the tool imports it only when it runs)."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import gate_peers  # noqa: E402


def test_summary_numbers_are_json():
    got = gate_peers.as_report_numbers({"w": [{"worst": math.inf, "cases": 3}, {"worst": -math.inf},
                                              {"worst": math.nan, "t": (1, 0.5)}], "verdict": "FAIL"})
    assert got == {"w": [{"worst": "inf", "cases": 3}, {"worst": "-inf"}, {"worst": "nan", "t": [1, 0.5]}],
                   "verdict": "FAIL"}
    json.dumps(got, allow_nan=False)  # raises ValueError if a non-finite float is left


if __name__ == "__main__":
    test_summary_numbers_are_json()
    print("ok")
