"""tools/journal_merge.py reads an external's error prefix as the gate does
(harness/external.h parse_external_error, journal.h nondeterministic_impl):
only the tags "nondeterministic: " and "contract broken: " at the start,
then "external implementation NAME (", make an error a finding about NAME;
an untagged error (whose ORIGIN, a plugin's path, may hold any wording) or a
tag quoted later in a message never does. The rows are those of
tests/gate/external_test.cpp's ParseExternalErrorReadsTheKindAndNameAtFixedPlacesOnly.
Runs under pytest or as `python3 tests/tools/test_journal_merge_findings.py`."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import journal_merge  # noqa: E402

ROWS = [
    ("external implementation my_k (plugin /x/libk.so) failed on H=64,T=5: out of memory", ""),
    ("nondeterministic: external implementation my_k (python) is declared deterministic but two runs on H=64,T=5 "
     "gave different bits: rstd element 3 0x3f800000 vs 0x3f800001", "my_k"),
    ("external implementation my_k (python) is declared deterministic but two runs on H=64,T=5 gave different bits",
     ""),
    ("external implementation my_k (plugin /x) is declared deterministic but two runs on y/libk.so) failed on "
     "H=64,T=5: out of memory", ""),
    ("contract broken: external implementation my_k (plugin /x/libk.so) on H=64,T=5: wrote outside the view of y",
     "my_k"),
    ("external implementation my_k (plugin /x/libk.so) failed on H=64,T=5: external implementation other (y) is "
     "declared deterministic but two runs on it", ""),
    ("external implementation my_k (plugin /x/libk.so) failed on H=64,T=5: nondeterministic: external "
     "implementation other (z)", ""),
    ("CUDA error: out of memory; contract broken: external implementation my_k (q)", ""),
    ("nondeterministic: dw differs", ""),
    ("contract broken: ", ""),
    ("nondeterministic: external implementation  (x) differs", ""),
    ("", ""),
]


def test_only_tagged_errors_name_a_finding():
    for text, impl in ROWS:
        assert journal_merge.nondeterministic_impl(text) == impl, text
    assert journal_merge.nondeterministic_impl(None) == ""


def test_a_finding_is_kept_and_an_untagged_error_is_replaced():
    finding = {"error": ROWS[1][0]}
    failed = {"error": ROWS[3][0]}
    result = {"impl": "my_k", "ran_on": "cpu", "y": {}, "rstd": {}}
    assert journal_merge.resolve_duplicate(finding, result, "my_k") == "keep"
    assert journal_merge.resolve_duplicate(result, finding, "my_k") == "replace"
    # The untagged error whose path holds the wording is a failed attempt.
    assert journal_merge.resolve_duplicate(failed, result, "my_k") == "replace"
    assert journal_merge.resolve_duplicate(result, failed, "my_k") == "keep"


if __name__ == "__main__":
    test_only_tagged_errors_name_a_finding()
    test_a_finding_is_kept_and_an_untagged_error_is_replaced()
    print("test_journal_merge_findings: ok")
