"""tools/rekey_approvals.py in a scratch git repository holding the variants'
sources (copied from this tree): a comment-only change re-keys exactly the
approvals (and rejections, seals recomputed) of the old hashes (to the hashes
CMake's manifest gives) and leaves every other byte; a changed code token is
refused (exit 1) and nothing is written; usage errors exit 2. Plus the comment/code test on small snippets.
Needs gcc and git (exit 77 without them when run as a script).
Runs under pytest or as `python3 tests/tools/test_rekey_approvals.py`."""
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "rekey_approvals.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import rekey_approvals as rk  # noqa: E402

if __name__ != "__main__" and (shutil.which("gcc") is None or shutil.which("git") is None):
    import pytest
    pytest.skip("no gcc or git", allow_module_level=True)


def have_tools():
    return shutil.which("gcc") is not None and shutil.which("git") is not None


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def sh(repo, *args):
    subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True)


def lists():
    with open(os.path.join(ROOT, "kernels", "CMakeLists.txt")) as f:
        return rk.variant_files(f.read(), "kernels/CMakeLists.txt")


def hashes(repo):
    """CMake's hash of each variant, computed here from the files on disk."""
    out = {}
    for v, files in lists().items():
        m = ""
        for f in files:
            with open(os.path.join(repo, "kernels", f), "rb") as fh:
                m += hashlib.sha256(fh.read()).hexdigest() + "  " + f + "\n"
        out[v] = hashlib.sha256(m.encode()).hexdigest()
    return out


def scratch_repo(d):
    repo = os.path.join(d, "repo")
    files = {f for fs in lists().values() for f in fs} | {"CMakeLists.txt"}
    for f in files:
        dst = os.path.normpath(os.path.join(repo, "kernels", f))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.normpath(os.path.join(ROOT, "kernels", f)), dst)
    sh(d, "init", "-q", repo)
    sh(repo, "add", "-A")
    sh(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "A")
    return repo


def approvals_file(d, h):
    entries = [
        {"variant": "fwd_rowwise", "source_sha256": h["fwd_rowwise"], "cases": 2032,
         "max_err_tol": {"rstd": 0.005959185655411634, "y": 0.38313068945667},
         "window": {"H": 1536, "T": [1, 131072], "form": "plain", "op": "fwd", "w": "bf16"}},
        {"variant": "bwd_det_chunked", "source_sha256": h["bwd_det_chunked"], "cases": 7,
         "window": {"H": 4096, "T": [1, 65536], "form": "plain", "op": "bwd", "mode": "det", "w": "bf16"}},
        {"variant": "bwd_det_chunked", "source_sha256": h["bwd_det_chunked"], "cases": 8,
         "window": {"H": 4096, "T": [65537, 131072], "form": "plain", "op": "bwd", "mode": "det", "w": "bf16"}},
        # stale before the change (another hash): left as it is
        {"variant": "bwd_nondet_atomic", "source_sha256": "0" * 64, "cases": 1,
         "window": {"H": 2048, "T": [1, 7], "form": "plain", "op": "bwd", "mode": "nondet", "w": "fp32"}},
    ]
    p = os.path.join(d, "t.approvals.json")
    with open(p, "w") as f:
        f.write(json.dumps({"approvals": entries, "format": "normgate-approvals/1"}, indent=2, sort_keys=True) + "\n")
    return p


def edit(repo, rel, old, new):
    p = os.path.join(repo, rel)
    with open(p) as f:
        s = f.read()
    assert s.count(old) >= 1, (rel, old)
    with open(p, "w") as f:
        f.write(s.replace(old, new, 1))


def comment_only_change(repo):
    edit(repo, "kernels/src/device_blocks.cuh", "#pragma once", "// (a new comment line)\n#pragma once")
    edit(repo, "kernels/src/fwd_rowwise.cu", "// No minimum-blocks bound:", "/* see forward.md */ // No minimum-blocks bound:")


def test_comment_only_change_rekeys_exactly_the_old_hashes():
    with tempfile.TemporaryDirectory() as d:
        repo = scratch_repo(d)
        before = hashes(repo)
        ap = approvals_file(d, before)
        text = open(ap).read()
        comment_only_change(repo)
        after = hashes(repo)
        assert after["fwd_rowwise"] != before["fwd_rowwise"] and after["bwd_det_chunked"] != before["bwd_det_chunked"]
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap, "--dry-run")
        assert r.returncode == 0 and "3 approvals re-keyed" in r.stdout and "dry run" in r.stdout, r.stdout + r.stderr
        assert open(ap).read() == text  # nothing written
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "kernels/src/device_blocks.cuh" in r.stdout and "kernels/src/fwd_rowwise.cu" in r.stdout
        assert f"fwd_rowwise op=fwd H=1536 w=bf16 form=plain T=[1, 131072]: {before['fwd_rowwise'][:12]} -> " \
               f"{after['fwd_rowwise'][:12]}" in r.stdout, r.stdout
        assert "1 keyed by other hashes left as they are" in r.stdout, r.stdout
        new = open(ap).read()
        got = json.loads(new)["approvals"]
        assert [a["source_sha256"] for a in got] == \
            [after["fwd_rowwise"], after["bwd_det_chunked"], after["bwd_det_chunked"], "0" * 64]
        # every other byte as it was
        back = new.replace(after["fwd_rowwise"], before["fwd_rowwise"]).replace(
            after["bwd_det_chunked"], before["bwd_det_chunked"])
        assert back == text
        assert not [f for f in os.listdir(d) if f.startswith(".rekey-")]  # no temporary left
        # Run again: nothing left to re-key, the file stays as it is.
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap)
        assert r.returncode == 0 and "0 approvals re-keyed, 3 already current" in r.stdout, r.stdout
        assert open(ap).read() == new


def test_a_changed_code_token_is_refused_and_nothing_is_written():
    with tempfile.TemporaryDirectory() as d:
        repo = scratch_repo(d)
        ap = approvals_file(d, hashes(repo))
        text = open(ap).read()
        comment_only_change(repo)
        # One token of code: chunk_plan.h's chunk cap constant.
        p = os.path.join(repo, "kernels", "include", "normgate", "kernels", "chunk_plan.h")
        s = open(p).read()
        i = s.index("264", s.index("#pragma once"))  # past the comments: code
        open(p, "w").write(s[:i] + "265" + s[i + 3:])
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "kernels/include/normgate/kernels/chunk_plan.h: code differs" in r.stderr and "265" in r.stderr, r.stderr
        assert "nothing written" in r.stderr
        assert open(ap).read() == text
        # A comment added where a token had none beside it is also refused (conservative).
        sh(repo, "checkout", "-q", "--", ".")
        edit(repo, "kernels/src/nondet_replicas.h", "kAtomicReplicas = 8;", "kAtomicReplicas = 8/**/;")
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap)
        assert r.returncode == 1 and "nondet_replicas.h: code differs" in r.stderr, r.stderr
        assert open(ap).read() == text


def test_usage_errors_exit_2():
    r = run()
    assert r.returncode == 2 and "--old-commit" in r.stderr, r.stderr
    with tempfile.TemporaryDirectory() as d:
        repo = scratch_repo(d)
        r = run("--repo", repo, "--old-commit", "no-such-commit-xyz")
        assert r.returncode == 2 and "'no-such-commit-xyz' is not a commit" in r.stderr, r.stderr
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", os.path.join(d, "none.json"))
        assert r.returncode == 2 and "none.json" in r.stderr, r.stderr
        bad = os.path.join(d, "bad.json")
        open(bad, "w").write('{"rows": []}')
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", bad)
        assert r.returncode == 2 and "not an approvals file" in r.stderr, r.stderr
        r = run("--repo", os.path.join(d, "nowhere"), "--old-commit", "HEAD")
        assert r.returncode == 2 and "not a git repository" in r.stderr, r.stderr


def test_write_all_writes_every_file_or_none():
    with tempfile.TemporaryDirectory() as d:
        a = os.path.join(d, "a.json")
        with open(a, "w") as f:
            f.write("old a")
        missing = os.path.join(d, "gone", "b.json")  # cannot be staged
        try:
            rk.write_all({a: "new a", missing: "new b"})
            raise AssertionError("write_all did not fail")
        except OSError as e:
            assert "nothing written" in e.strerror, e.strerror
        with open(a) as f:
            assert f.read() == "old a"
        assert sorted(os.listdir(d)) == ["a.json"], os.listdir(d)  # no temporary left
        rk.write_all({a: "new a"})
        with open(a) as f:
            assert f.read() == "new a"


def test_comments_and_code_on_snippets():
    gcc = shutil.which("gcc")
    base = b"""// head
#pragma once
#define F(x) ((x) + 1)  // c
#define S "a  b"
int f(int a) { return a + +1; } /* x */
const char* s = "x  y"; // tail
"""
    same = {
        "comments edited": base.replace(b"// head", b"// a longer\n// head").replace(b"/* x */", b"/* y\n z */"),
        "spaces in code": base.replace(b"a + +1", b"a  +\t+1"),
    }
    differ = {
        "a token": base.replace(b"+ +1", b"+ +2"),
        "two tokens merged": base.replace(b"+ +1", b"++1"),
        "a string's spaces": base.replace(b'"x  y"', b'"x y"'),
        "a function-like macro made object-like": base.replace(b"F(x)", b"F (x)"),
        "a directive line joined": base.replace(b'"a  b"\nint', b'"a  b" int'),
        "#pragma once dropped": base.replace(b"#pragma once\n", b""),
        "a comment turned into code": base.replace(b"// tail", b"int z;"),
        "a comment's backslash swallowing the next line": base.replace(b"// c\n", b"// c \\\n"),
        "the same with blanks after the backslash": base.replace(b"// c\n", b"// c \\  \n"),
    }
    for k, v in same.items():
        assert rk.code_difference(gcc, "t.h", base, v) is None, k
    for k, v in differ.items():
        assert rk.code_difference(gcc, "t.h", base, v) is not None, k


def test_record_digest_is_normgates():
    """The tool's record_sha256 is the one normgate writes: every record of
    the committed approvals (sealed by `normgate approvals --seal`) checks."""
    with open(os.path.join(ROOT, "routes", "sm90a.approvals.json")) as f:
        recs = json.load(f)["approvals"]
    assert recs and all(rk.record_digest(a) == a["record_sha256"] for a in recs)


def test_sealed_records_get_their_digest_recomputed():
    with tempfile.TemporaryDirectory() as d:
        repo = scratch_repo(d)
        before = hashes(repo)
        ap = approvals_file(d, before)
        doc = json.load(open(ap))
        for a in doc["approvals"]:
            a["record_sha256"] = rk.record_digest(a)
        sealed = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        comment_only_change(repo)
        after = hashes(repo)
        # A damaged sealed record is refused, nothing written.
        doc["approvals"][0]["cases"] += 1
        damaged = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        open(ap, "w").write(damaged)
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap)
        assert r.returncode == 1 and "does not match its bytes" in r.stderr, r.stdout + r.stderr
        assert open(ap).read() == damaged
        # Intact: re-keyed, each re-keyed record's digest recomputed.
        open(ap, "w").write(sealed)
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap)
        assert r.returncode == 0, r.stdout + r.stderr
        got = json.load(open(ap))["approvals"]
        assert [a["source_sha256"] for a in got][:3] == \
            [after["fwd_rowwise"], after["bwd_det_chunked"], after["bwd_det_chunked"]]
        assert all(rk.record_digest(a) == a["record_sha256"] for a in got)
        assert got[3] == json.loads(sealed)["approvals"][3]  # another hash: untouched, digest and all

def test_a_carried_records_chain_keeps_the_hash_its_digests_compared():
    """A record carried to a source (normgate approvals --carry) names that
    hash again in its chain's to_source_sha256; a comment-only re-key changes
    the record's source_sha256 alone and leaves the chain as the digests
    proved it."""
    with tempfile.TemporaryDirectory() as d:
        repo = scratch_repo(d)
        before = hashes(repo)
        ap = approvals_file(d, before)
        doc = json.load(open(ap))
        carry = {"from_source_sha256": "e" * 64, "to_source_sha256": before["fwd_rowwise"],
                 "digests_old": "1" * 64, "digests_new": "2" * 64, "cases": 5, "gpu": "NVIDIA H200",
                 "date": "2026-12-04T12:00:00Z", "normgate_commit": "103d70420e6e"}
        doc["approvals"][0]["carried"] = [carry]
        for a in doc["approvals"]:
            a["record_sha256"] = rk.record_digest(a)
        open(ap, "w").write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        comment_only_change(repo)
        after = hashes(repo)
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap)
        assert r.returncode == 0, r.stdout + r.stderr
        got = json.load(open(ap))["approvals"]
        assert got[0]["source_sha256"] == after["fwd_rowwise"]
        assert got[0]["carried"] == [carry]  # the chain as the digests proved it
        assert all(rk.record_digest(a) == a["record_sha256"] for a in got)


def rejections_file(d, h):
    """Three sealed rejections: two keyed to h (one re-proved from an older
    source by `approvals --recheck`), one to another hash."""
    def rec(T, source, **extra):
        r = {"backend": "gpu", "date": "2026-12-04T12:00:00Z", "gated_T": [T, T + 9], "gpu": "NVIDIA H200",
             "normgate_commit": "103d70420e6e", "normgate_version": "0.2.0", "source_sha256": source,
             "variant": "bwd_fp32_blocked",
             "window": {"H": 2048, "T": [T, T + 9], "form": "plain", "mode": "det", "op": "bwd", "w": "fp32"},
             "worst_case": f"H=2048,T={T},w=fp32,form=plain,family=cancel,seed=0", "worst_err_tol": 19.53125,
             "worst_output": "dw", **extra}
        r["record_sha256"] = rk.record_digest(r)
        return r
    recs = [rec(2, h["bwd_fp32_blocked"]),
            rec(12, h["bwd_fp32_blocked"], rechecked={"backend": "gpu", "from_source_sha256": "e" * 64,
                                                      "from_record_sha256": "f" * 64}),
            rec(22, "0" * 64)]
    p = os.path.join(d, "t.rejections.json")
    with open(p, "w") as f:
        f.write(json.dumps({"format": "normgate-rejections/1", "rejections": recs}, indent=2, sort_keys=True) + "\n")
    return p


def test_rejections_are_rekeyed_with_their_seals():
    with tempfile.TemporaryDirectory() as d:
        repo = scratch_repo(d)
        before = hashes(repo)
        ap, rj = approvals_file(d, before), rejections_file(d, before)
        old = json.load(open(rj))["rejections"]
        comment_only_change(repo)
        after = hashes(repo)
        assert after["bwd_fp32_blocked"] != before["bwd_fp32_blocked"]
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap, "--rejections", rj)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "3 approvals re-keyed" in r.stdout and "2 rejections re-keyed" in r.stdout, r.stdout
        got = json.load(open(rj))["rejections"]
        assert [x["source_sha256"] for x in got] == [after["bwd_fp32_blocked"]] * 2 + ["0" * 64]
        assert all(rk.record_digest(x) == x["record_sha256"] for x in got)
        assert got[0]["record_sha256"] != old[0]["record_sha256"]
        assert got[1]["rechecked"] == old[1]["rechecked"]  # the chain names the older record as it was
        assert got[2] == old[2]
        # --rejections alone leaves approvals files alone.
        comment_only_change(repo)
        again = hashes(repo)
        text = open(ap).read()
        r = run("--repo", repo, "--old-commit", "HEAD", "--rejections", rj)
        assert r.returncode == 0 and "rejections re-keyed" in r.stdout and "approvals re-keyed" not in r.stdout, r.stdout
        assert open(ap).read() == text
        # HEAD holds `before`: the file's records are keyed to `after` now, not HEAD's, so nothing moves.
        assert [x["source_sha256"] for x in json.load(open(rj))["rejections"]][:2] == [after["bwd_fp32_blocked"]] * 2
        assert again["bwd_fp32_blocked"] != after["bwd_fp32_blocked"]


def rejections_then_comment_change(d):
    """A scratch repository, a rejections file of its sources, then a
    comment-only change: (repo, rejections path, hashes before, after)."""
    repo = scratch_repo(d)
    before = hashes(repo)
    rj = rejections_file(d, before)
    comment_only_change(repo)
    return repo, rj, before, hashes(repo)

def test_a_rejection_that_would_duplicate_is_refused():
    with tempfile.TemporaryDirectory() as d:
        repo, rj, before, after = rejections_then_comment_change(d)
        doc = json.load(open(rj))
        twin = copy.deepcopy(doc["rejections"][0])
        twin["source_sha256"] = after["bwd_fp32_blocked"]  # the same claim, made again for the new source
        twin["record_sha256"] = rk.record_digest(twin)
        doc["rejections"].append(twin)
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        open(rj, "w").write(text)
        r = run("--repo", repo, "--old-commit", "HEAD", "--rejections", rj)
        assert r.returncode == 1 and "would duplicate" in r.stderr and "nothing written" in r.stderr, r.stdout + r.stderr
        assert open(rj).read() == text


def test_rejection_digest_is_normgates():
    """The committed rejections (sealed by normgate) check with the tool's digest."""
    with open(os.path.join(ROOT, "routes", "sm90a.rejections.json")) as f:
        recs = json.load(f)["rejections"]
    assert recs and all(rk.record_digest(x) == x["record_sha256"] for x in recs)


def test_a_failed_rename_restores_the_files_already_renamed():
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        open(a, "w").write("A0")
        open(b, "w").write("B0")
        real, calls = os.replace, []

        def failing(src, dst):
            calls.append(dst)
            if dst == b and len([c for c in calls if c == b]) == 1:
                raise PermissionError(1, "Operation not permitted")
            return real(src, dst)
        os.replace = failing
        try:
            rk.write_all({a: "A1", b: "B1"})
            assert False, "no error"
        except OSError as e:
            assert "cannot replace " + b in e.strerror and "nothing written" in e.strerror, e.strerror
        finally:
            os.replace = real
        assert open(a).read() == "A0" and open(b).read() == "B0"
        assert sorted(os.listdir(d)) == ["a.json", "b.json"]  # no temporary left


def test_rejections_files_normgate_would_refuse_are_refused():
    with tempfile.TemporaryDirectory() as d:
        repo, rj, before, after = rejections_then_comment_change(d)
        good = json.load(open(rj))

        def attempt(doc, want):
            text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
            open(rj, "w").write(text)
            r = run("--repo", repo, "--old-commit", "HEAD", "--rejections", rj)
            assert r.returncode == 1 and want in r.stderr, r.stdout + r.stderr
            assert open(rj).read() == text
        # An unsealed rejection, and a damaged seal on a record not re-keyed.
        doc = copy.deepcopy(good)
        del doc["rejections"][0]["record_sha256"]
        attempt(doc, "has no record_sha256")
        doc = copy.deepcopy(good)
        doc["rejections"][2]["worst_err_tol"] = 1.5
        attempt(doc, "does not match its bytes")
        # A record re-proved from the hash it would be re-keyed to.
        doc = copy.deepcopy(good)
        doc["rejections"][1]["rechecked"]["from_source_sha256"] = after["bwd_fp32_blocked"]
        doc["rejections"][1]["record_sha256"] = rk.record_digest(doc["rejections"][1])
        attempt(doc, "its own source")


def test_links_are_followed_and_a_file_is_named_once():
    with tempfile.TemporaryDirectory() as d:
        repo = scratch_repo(d)
        before = hashes(repo)
        rj = rejections_file(d, before)
        link = os.path.join(d, "link.rejections.json")
        os.symlink(rj, link)
        comment_only_change(repo)
        after = hashes(repo)
        r = run("--repo", repo, "--old-commit", "HEAD", "--rejections", link, "--rejections",
                os.path.join(d, ".", "t.rejections.json"))
        assert r.returncode == 2 and "named twice" in r.stderr, r.stdout + r.stderr
        r = run("--repo", repo, "--old-commit", "HEAD", "--rejections", link)
        assert r.returncode == 0, r.stdout + r.stderr
        assert os.path.islink(link)  # the link stays a link; the file it names is re-keyed
        assert json.load(open(rj))["rejections"][0]["source_sha256"] == after["bwd_fp32_blocked"]
        os.mkfifo(os.path.join(d, "f.rejections.json"))
        r = run("--repo", repo, "--old-commit", "HEAD", "--rejections", os.path.join(d, "f.rejections.json"))
        assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr


def test_a_vouched_records_history_stays_as_it_was():
    """A record vouched for by another variant (routes.md D23) names the
    voucher's source and seal in its "vouched" object: a re-key moves both
    records' own source_sha256 (and seals) and leaves that object alone."""
    with tempfile.TemporaryDirectory() as d:
        repo = scratch_repo(d)
        before = hashes(repo)
        ap = approvals_file(d, before)
        doc = json.load(open(ap))
        v = doc["approvals"][1]  # bwd_det_chunked H=4096 [1, 65536]
        v["record_sha256"] = rk.record_digest(v)
        w = copy.deepcopy(v)
        del w["record_sha256"]
        w["variant"] = "bwd_det_wreg"
        w["source_sha256"] = before["bwd_det_wreg"]
        w["vouched"] = {"variant": "bwd_det_chunked", "record_sha256": v["record_sha256"],
                        "source_sha256": before["bwd_det_chunked"], "digests_v": "1" * 64, "digests_w": "2" * 64,
                        "cases": 7, "gpu": "NVIDIA H200", "date": "2026-12-04T12:00:00Z",
                        "normgate_commit": "103d70420e6e"}
        w["record_sha256"] = rk.record_digest(w)
        doc["approvals"].append(w)
        open(ap, "w").write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        comment_only_change(repo)
        after = hashes(repo)
        r = run("--repo", repo, "--old-commit", "HEAD", "--approvals", ap)
        assert r.returncode == 0, r.stdout + r.stderr
        got = json.load(open(ap))["approvals"]
        assert got[1]["source_sha256"] == after["bwd_det_chunked"]
        assert got[4]["source_sha256"] == after["bwd_det_wreg"]
        assert got[4]["vouched"] == w["vouched"]  # the history as it was
        assert all(rk.record_digest(a) == a["record_sha256"] for a in got if "record_sha256" in a)


if __name__ == "__main__":
    if not have_tools():
        print("skipped: no gcc or git")
        sys.exit(77)
    test_comments_and_code_on_snippets()
    test_write_all_writes_every_file_or_none()
    test_comment_only_change_rekeys_exactly_the_old_hashes()
    test_a_changed_code_token_is_refused_and_nothing_is_written()
    test_usage_errors_exit_2()
    test_record_digest_is_normgates()
    test_sealed_records_get_their_digest_recomputed()
    test_a_carried_records_chain_keeps_the_hash_its_digests_compared()
    test_rejections_are_rekeyed_with_their_seals()
    test_a_rejection_that_would_duplicate_is_refused()
    test_rejection_digest_is_normgates()
    test_a_failed_rename_restores_the_files_already_renamed()
    test_rejections_files_normgate_would_refuse_are_refused()
    test_links_are_followed_and_a_file_is_named_once()
    test_a_vouched_records_history_stays_as_it_was()
    print("test_rekey_approvals: ok")
