#!/usr/bin/env python3
"""Re-key route approvals and rejections after a comment-only change to a
variant's sources.

Each variant's source hash (registry.h: Variant::source_sha256) is the SHA-256
of its manifest, the lines "sha256(file)  file\\n" over its files in order,
paths relative to kernels/, as kernels/CMakeLists.txt computes it at configure
time (the file lists ng_variant_<name> there). Editing a comment in one of
those files changes the hash, and every approval keyed by the old hash turns
stale. This tool re-keys them, and only when that is provably safe:

  1. For each variant it reads the file list from kernels/CMakeLists.txt at
     OLD (--old-commit) and in the working tree, and computes both hashes the
     way CMake does. The lists must be the same.
  2. Every listed file whose bytes differ is stripped of its comments by the
     C preprocessor (`gcc -fpreprocessed -dD -E -P -x c++`: no includes, no
     macro expansion, comments removed) and tokenized; the token streams (each
     token with whether whitespace precedes it, directive lines kept as
     lines, literals verbatim) must be identical, and so must the number of
     `#pragma once` lines (which gcc drops from a main file). Any difference
     is a code change: the tool prints the file and the first differing
     tokens, exits 1 and writes nothing.
  3. Only then, in each approvals file, an approval whose variant's hash was
     OLD's is given the working tree's hash (and so is a rejection of each
     rejections file, routing/include/normgate/routing/rejections.h: the
     same fields and the same seal; a rejection whose re-keyed copy would
     duplicate a record already keyed to the new hash, same window, variant
     and backend, is refused); every other field, and every
     approval keyed by any other hash, is left as it is (the file's text is
     changed in those "source_sha256" values only, and in the "record_sha256"
     of a re-keyed record that carries one: checked against the record's
     bytes first, recomputed after; and checked by parsing it
     again). A carry's chain (`carried`) and a `vouched` object keep the
     hashes they name: history. Every seal in each file must hold first.
     Every file is written or none: each is staged in a temporary file
     beside it with a copy of its bytes, and only when all are staged are
     they renamed (a failed rename puts back those already renamed). It
     holds the lock normgate's writers hold (TABLE.approvals.json.lock).
     It prints what it re-keyed.

What it does not prove: line numbers move with the comments (__LINE__, debug
info), so an error message may name another line; nothing a kernel computes
depends on them.

Usage: tools/rekey_approvals.py --old-commit REV [--approvals FILE ...]
                                [--rejections FILE ...] [--repo DIR] [--dry-run]
  --old-commit REV  the commit whose sources the approvals were made on
  --approvals FILE  an approvals JSON (repeatable)
  --rejections FILE a rejections JSON (repeatable)
                    (with neither: the repository's routes/sm90a.approvals.json
                    and, when it exists, routes/sm90a.rejections.json)
  --repo DIR        the repository (default: the one this script is in)
  --dry-run         check and print, write nothing
NG_REKEY_GCC names the compiler driver (default gcc).
Exit status: 0 re-keyed (or nothing to do), 1 refused (a file differs in
code, the file lists differ, a seal is damaged or a rejection unsealed, an
approvals or rejections file would change elsewhere, or a re-keyed
rejection would duplicate one or name its own source as re-proved from),
2 usage error or nothing could be checked (bad commit, no gcc, unreadable
file).
"""
import argparse
import copy
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

KERNELS = "kernels"


class Refused(Exception):
    """Exit 1: re-keying would not be safe."""


class Unusable(Exception):
    """Exit 2: the inputs could not be read or checked."""


def git(repo, *args):
    r = subprocess.run(["git", "-C", repo, *args], capture_output=True)
    if r.returncode != 0:
        raise Unusable(f"git {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def read_at(repo, rev, relpath):
    """Bytes of repo-relative relpath at rev (None: the working tree); None if absent."""
    if rev is None:
        p = os.path.join(repo, relpath)
        if not os.path.isfile(p):
            return None
        with open(p, "rb") as f:
            return f.read()
    r = subprocess.run(["git", "-C", repo, "show", f"{rev}:{relpath}"], capture_output=True)
    return r.stdout if r.returncode == 0 else None


def variant_files(cmake_text, where):
    """{variant: [file, ...]} from kernels/CMakeLists.txt: the set() lists and
    the foreach(v ...) that hashes ng_variant_${v}."""
    text = "\n".join(line.split("#", 1)[0] for line in cmake_text.splitlines())
    sets = {}
    for m in re.finditer(r"\bset\(\s*([A-Za-z_][A-Za-z0-9_]*)\s+([^()]*)\)", text):
        sets[m.group(1)] = m.group(2).split()

    def expand(items, depth=0):
        out = []
        for it in items:
            m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", it)
            if m:
                if m.group(1) not in sets or depth > 16:
                    raise Unusable(f"{where}: cannot expand {it}")
                out += expand(sets[m.group(1)], depth + 1)
            elif "$" in it:
                raise Unusable(f"{where}: cannot read the list item {it!r}")
            else:
                out.append(it)
        return out

    m = re.search(r"\bforeach\(\s*v\s+([^()]*)\)(?=[\s\S]*?ng_variant_\$\{v\})", text)
    if not m:
        raise Unusable(f"{where}: no foreach(v ...) over ng_variant_${{v}}")
    out = {}
    for v in m.group(1).split():
        if f"ng_variant_{v}" not in sets:
            raise Unusable(f"{where}: no set(ng_variant_{v} ...)")
        out[v] = expand(sets[f"ng_variant_{v}"])
    if not out:
        raise Unusable(f"{where}: no variants")
    return out


def manifest_hash(files, contents):
    """CMake's: sha256 of the lines "sha256(file)  file\\n"."""
    manifest = "".join(f"{hashlib.sha256(contents[f]).hexdigest()}  {f}\n" for f in files)
    return hashlib.sha256(manifest.encode()).hexdigest()


def repo_path(f):
    return os.path.normpath(os.path.join(KERNELS, f))


# --- comment-only proof ------------------------------------------------------

PUNCT = sorted("""
%:%: ... <=> <<= >>= ->* :: -> ++ -- << >> <= >= == != && || += -= *= /= %= &= |= ^= ## .* <: :> <% %> %:
""".split(), key=len, reverse=True)
TOKEN = re.compile(
    r"(?P<raw>(?:u8|u|U|L)?R\"(?P<d>[^()\\\s\"]{0,16})\((?:.|\n)*?\)(?P=d)\")"
    r"|(?P<str>(?:u8|u|U|L)?\"(?:\\(?:.|\n)|[^\"\\\n])*\")"
    r"|(?P<chr>(?:u8|u|U|L)?'(?:\\(?:.|\n)|[^'\\\n])*')"
    r"|(?P<num>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*)"
    r"|(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)"
    r"|(?P<punct>" + "|".join(re.escape(p) for p in PUNCT) + r")"
    r"|(?P<splice>\\\n)"
    r"|(?P<nl>\n)"
    r"|(?P<ws>[ \t\f\v\r]+)"
    r"|(?P<other>.)")
PRAGMA_ONCE = re.compile(rb"^[ \t]*#[ \t]*pragma[ \t]+once\b", re.M)


# Translation phase 2 before comments are seen: a backslash at the end of a
# line (gcc also accepts blanks after it) joins the next line, so a `//`
# comment ending in one swallows that line of code. gcc -fpreprocessed keeps
# the lines apart; splicing first makes such an edit a code difference.
SPLICE = re.compile(rb"\\[ \t]*\r?\n")


def strip_comments(gcc, data, name):
    data = SPLICE.sub(b"", data)
    r = subprocess.run([gcc, "-fpreprocessed", "-dD", "-E", "-P", "-w", "-x", "c++", "-"],
                       input=data, capture_output=True)
    if r.returncode != 0:
        raise Refused(f"{name}: the preprocessor could not read it: "
                      f"{r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode("utf-8", errors="surrogateescape")


def tokens(text):
    """[(token, whitespace before it)], with "<EOL>" closing each directive line."""
    out = []
    white = False      # whitespace since the last token
    line_start = True  # no token yet on this logical line
    directive = False
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "splice"):
            white = True
        elif kind == "nl":
            if directive:
                out.append(("<EOL>", False))
            white, line_start, directive = True, True, False
        else:
            if line_start:
                directive = m.group() in ("#", "%:")
                line_start = False
            out.append((m.group(), white))
            white = False
    if directive:
        out.append(("<EOL>", False))
    return out


def code_difference(gcc, name, old, new):
    """None if old and new differ in comments only, else a line saying where."""
    if old == new:
        return None
    po, pn = len(PRAGMA_ONCE.findall(old)), len(PRAGMA_ONCE.findall(new))
    if po != pn:
        return f"{name}: #pragma once lines {po} -> {pn}"
    a, b = tokens(strip_comments(gcc, old, name)), tokens(strip_comments(gcc, new, name))
    if a == b:
        return None
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    def show(ts):
        s = "".join((" " if w else "") + t for t, w in ts[max(0, i - 6):i + 6]).strip()
        return s if s else "(end of file)"
    return f"{name}: code differs at token {i}: old `{show(a)}` / new `{show(b)}`"


# --- approvals ---------------------------------------------------------------

def parse_records(path, text, key="approvals"):
    """The parsed file; Unusable unless it holds a list `key` ("approvals" or
    "rejections") of objects."""
    what = "approval" if key == "approvals" else "rejection"
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise Unusable(f"{path}: not JSON ({e})")
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise Unusable(f"{path}: not an {key} file (no \"{key}\" list)")
    for a in doc[key]:
        if not isinstance(a, dict):
            raise Unusable(f"{path}: an {what} that is not an object: {a!r}")
    return doc


def parse_approvals(path, text):
    return parse_records(path, text, "approvals")


def record_digest(a):
    """record_sha256 of an approval record (routing.h, "Validation"): SHA-256
    of its compact JSON without that field, keys sorted, as
    nlohmann::json::dump() writes it (Python's repr of a float is the same
    shortest round-trip text; rekey_text checks the old digest first, so a
    difference refuses instead of writing a wrong one)."""
    body = {k: v for k, v in a.items() if k != "record_sha256"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def rekey_text(path, text, new_of_old, key="approvals"):
    """The approvals (or, key="rejections", rejections) text with
    source_sha256 old -> new (new_of_old: {variant: (old, new)}), and the list
    of (entry, old, new) re-keyed; Refused if the text cannot be changed in
    those values alone."""
    doc = parse_records(path, text, key)
    want = copy.deepcopy(doc)
    done, kept = [], []
    digests = []  # (old record_sha256, new) of the re-keyed sealed records
    targets = {}  # old hash -> (new hash, records re-keyed from it)
    # A file normgate would refuse is refused here too: every seal must hold
    # (a rejection must carry one), not only those of the records re-keyed.
    for a in doc[key]:
        if key == "rejections" and not isinstance(a.get("record_sha256"), str):
            raise Refused(f"{path}: the rejection of {describe(a)} has no record_sha256 (rejections are always "
                          "sealed: `normgate approvals FILE` says more)")
        try:
            if "record_sha256" in a and record_digest(a) != a["record_sha256"]:
                raise Refused(f"{path}: the record_sha256 of {describe(a)} does not match its bytes (a damaged "
                              "record: `normgate approvals FILE` says more)")
        except UnicodeEncodeError as e:
            raise Unusable(f"{path}: a record that is not valid Unicode ({e.reason}): {describe(a)}")
    for a, w in zip(doc[key], want[key]):
        v, h = a.get("variant"), a.get("source_sha256")
        if not isinstance(v, str) or not isinstance(h, str):
            kept.append(a)
            continue
        if v in new_of_old and h == new_of_old[v][0] and new_of_old[v][0] != new_of_old[v][1]:
            n = new_of_old[v][1]
            if targets.setdefault(h, (n, []))[0] != n:
                raise Refused(f"{path}: hash {h[:12]} would map to two new hashes")
            targets[h][1].append(a)
            w["source_sha256"] = n
            if "record_sha256" in a:
                # A sealed record: its digest must hold before, and is
                # recomputed after (a re-key never seals a damaged record).
                if record_digest(a) != a["record_sha256"]:
                    raise Refused(f"{path}: the record_sha256 of {describe(a)} does not match its bytes (a damaged "
                                  "record: `normgate approvals FILE` says more)")
                w["record_sha256"] = record_digest(w)
                digests.append((a["record_sha256"], w["record_sha256"]))
            done.append((a, h, n))
        else:
            kept.append(a)
    out = text
    # A record a variant vouched for (routing.h, Approval::vouched) names the
    # voucher's source and seal at the time in its "vouched" object: history,
    # kept as it was. Its keys are those of a record's own source_sha256 and
    # record_sha256, so matches inside such an object (one level, no nested
    # braces) are left alone.
    def vouched_spans(t):
        return [m.span() for m in re.finditer(r'"vouched"\s*:\s*\{[^{}]*\}', t)]

    def outside(t, pat):
        sp = vouched_spans(t)
        return [m for m in pat.finditer(t) if not any(a <= m.start() < b for a, b in sp)]

    def replace(t, ms, value):
        for m in reversed(ms):
            t = t[:m.start()] + m.group(1) + value + m.group(2) + t[m.end():]
        return t
    for h, (n, entries) in targets.items():
        pat = re.compile(r'("source_sha256"\s*:\s*")' + h + r'(")')
        # The hash may also stand in a carried record's chain (routing.h,
        # Approval::carried), which keeps it: what the digests compared; and
        # in a vouched object (above).
        in_chain = len(re.findall(r'"(?:from|to)_source_sha256"\s*:\s*"' + h + r'"', out))
        ms = outside(out, pat)
        in_vouch = len(pat.findall(out)) - len(ms)
        if len(ms) != len(entries) or out.count(h) - in_chain - in_vouch != len(entries):
            raise Refused(f"{path}: {h[:12]} appears {out.count(h)} times, in {len(entries)} approvals to re-key")
        out = replace(out, ms, n)
    for o, n in digests:
        pat = re.compile(r'("record_sha256"\s*:\s*")' + o + r'(")')
        ms = outside(out, pat)
        if len(ms) != 1:
            raise Refused(f"{path}: record_sha256 {o[:12]} appears {len(ms)} times")
        out = replace(out, ms, n)
    if key == "rejections" and done:
        # rejections.h: one record per window, variant, source and backend,
        # and a re-proved record names an earlier source than its own.
        def slot(w):
            return (json.dumps(w.get("window"), sort_keys=True), w.get("variant"), w.get("source_sha256"),
                    w.get("backend"))
        count = {}
        for w in want[key]:
            count[slot(w)] = count.get(slot(w), 0) + 1
        for a, w in zip(doc[key], want[key]):
            if a.get("source_sha256") == w.get("source_sha256"):
                continue  # not re-keyed
            if count[slot(w)] > 1:
                raise Refused(f"{path}: the re-keyed rejection of {describe(w)} would duplicate one already "
                              f"keyed to {str(w.get('source_sha256'))[:12]} (same window, variant and backend)")
            rc = w.get("rechecked")
            if isinstance(rc, dict) and rc.get("from_source_sha256") == w.get("source_sha256"):
                raise Refused(f"{path}: the re-keyed rejection of {describe(w)} would name its own source as the "
                              "one it was re-proved from (rechecked.from_source_sha256)")
    if json.loads(out) != want:
        raise Refused(f"{path}: the re-keyed text does not parse to the re-keyed {key}")
    return out, done, kept


def describe(a):
    w = a.get("window") or {}
    return (f"{a.get('variant')} " + " ".join(f"{k}={w[k]}" for k in ("op", "H", "w", "form", "T") if k in w)
            + (f" mode={w['mode']}" if "mode" in w else ""))


def stage(path, text):
    """The new text in a temporary file beside `path` (same mode), fsynced;
    its name. Raises OSError naming nothing written but the temporary."""
    d = os.path.dirname(os.path.abspath(path))
    st = os.stat(path)
    fd, tmp = tempfile.mkstemp(prefix=".rekey-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, st.st_mode & 0o7777)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def write_all(outs):
    """Write every {path: text} or none: each staged beside its file first,
    with a copy of its present bytes; only when all are staged are they
    renamed over the originals, and should a rename fail, the files already
    renamed get their earlier bytes back. Paths are the files themselves
    (symlinks resolved by the caller). Raises OSError naming the file."""
    staged, backups = {}, {}
    def clean():
        for tmp in list(staged.values()) + list(backups.values()):
            if os.path.exists(tmp):
                os.unlink(tmp)
    try:
        for p, text in outs.items():
            staged[p] = stage(p, text)
            with open(p, encoding="utf-8", newline="") as f:
                backups[p] = stage(p, f.read())
    except OSError as e:
        clean()
        raise OSError(e.errno, f"cannot write beside {p}: {e.strerror}; nothing written") from e
    done = []
    for p, tmp in staged.items():
        try:
            os.replace(tmp, p)
        except OSError as e:
            undone = []
            for q in reversed(done):
                try:
                    os.replace(backups[q], q)
                except OSError:
                    undone.append(q)
            clean()
            if undone:
                raise OSError(e.errno, f"cannot replace {p}: {e.strerror}; and could not restore "
                                       f"{', '.join(undone)} (re-keyed)") from e
            raise OSError(e.errno, f"cannot replace {p}: {e.strerror}; nothing written") from e
        done.append(p)
    for tmp in backups.values():
        os.unlink(tmp)


def lock_path(path, key):
    """The lock normgate's writers hold for this file (routing.h ApprovalsLock:
    the approvals file's path + ".lock"; a rejections file TABLE.rejections.json
    shares TABLE.approvals.json's)."""
    if key == "rejections" and path.endswith(".rejections.json"):
        ap = path[: -len(".rejections.json")] + ".approvals.json"
        return (os.path.realpath(ap) if os.path.exists(ap) else ap) + ".lock"
    return path + ".lock"


def take_locks(paths):
    """flock each lock file (sorted, so two tools never wait on each other);
    the open files, to keep until the writes are done."""
    held = []
    for lp in sorted(set(paths)):
        try:
            fd = os.open(lp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except PermissionError:
            fd = os.open(lp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"rekey_approvals: waiting for the lock '{lp}': another writer holds it", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    return held



def main(argv):
    ap = argparse.ArgumentParser(
        prog="tools/rekey_approvals.py",
        description="Re-key approvals after a comment-only change to variant sources (see the module docstring).")
    ap.add_argument("--old-commit", required=True, metavar="REV", help="the commit the approvals were made on")
    ap.add_argument("--approvals", action="append", metavar="FILE",
                    help="approvals JSON to re-key (repeatable)")
    ap.add_argument("--rejections", action="append", metavar="FILE",
                    help="rejections JSON to re-key (repeatable); with neither option: "
                         "routes/sm90a.approvals.json and, when it exists, routes/sm90a.rejections.json")
    ap.add_argument("--repo", metavar="DIR", help="the repository (default: this script's)")
    ap.add_argument("--dry-run", action="store_true", help="check and print, write nothing")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code not in (0, None) else 0
    repo = args.repo or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    try:
        repo = git(repo, "rev-parse", "--show-toplevel").decode().strip()
    except Unusable as e:
        print(f"rekey_approvals: --repo {repo}: not a git repository ({e})", file=sys.stderr)
        return 2
    approvals, rejections = args.approvals or [], args.rejections or []
    if not approvals and not rejections:
        approvals = [os.path.join(repo, "routes", "sm90a.approvals.json")]
        r = os.path.join(repo, "routes", "sm90a.rejections.json")
        rejections = [r] if os.path.exists(r) else []
    inputs = [(p, "approvals") for p in approvals] + [(p, "rejections") for p in rejections]
    try:
        old_rev = git(repo, "rev-parse", "--verify", "--quiet", args.old_commit + "^{commit}").decode().strip()
    except Unusable:
        print(f"rekey_approvals: --old-commit {args.old_commit!r} is not a commit of {repo}", file=sys.stderr)
        return 2
    gcc = shutil.which(os.environ.get("NG_REKEY_GCC", "gcc"))
    if not gcc:
        print("rekey_approvals: gcc not found (needed to strip comments: gcc -fpreprocessed)", file=sys.stderr)
        return 2
    # Symlinks resolved (the file a link names is rewritten, as normgate's
    # writers do), so a file named twice under two spellings is caught.
    resolved = []
    for p, key in inputs:
        rp = os.path.realpath(p)
        if not os.path.exists(rp):
            print(f"rekey_approvals: --{key} {p}: No such file or directory", file=sys.stderr)
            return 2
        if not os.path.isfile(rp):
            print(f"rekey_approvals: --{key} {p}: not a regular file", file=sys.stderr)
            return 2
        if any(rp == q for q, _ in resolved):
            print(f"rekey_approvals: {p} is named twice", file=sys.stderr)
            return 2
        resolved.append((rp, key))
    inputs = resolved
    if not args.dry_run:
        try:
            locks = take_locks([lock_path(p, key) for p, key in inputs])  # held until exit
        except OSError as e:
            print(f"rekey_approvals: cannot lock {e.filename}: {e.strerror}", file=sys.stderr)
            return 2
    texts = {}
    for p, key in inputs:
        try:
            with open(p, encoding="utf-8", newline="") as f:
                texts[p] = f.read()
            parse_records(p, texts[p], key)
        except OSError as e:
            print(f"rekey_approvals: --{key} {p}: {e.strerror}", file=sys.stderr)
            return 2
        except UnicodeDecodeError as e:
            print(f"rekey_approvals: --{key} {p}: not UTF-8 text ({e.reason} at byte {e.start})", file=sys.stderr)
            return 2
        except Unusable as e:
            print(f"rekey_approvals: {e}", file=sys.stderr)
            return 2
    try:
        cm = os.path.join(KERNELS, "CMakeLists.txt")
        old_cm, new_cm = read_at(repo, old_rev, cm), read_at(repo, None, cm)
        if old_cm is None or new_cm is None:
            raise Unusable(f"{cm} missing at {'the working tree' if new_cm is None else old_rev[:12]}")
        old_lists = variant_files(old_cm.decode(), f"{cm} at {old_rev[:12]}")
        new_lists = variant_files(new_cm.decode(), f"{cm} in the working tree")
        if old_lists != new_lists:
            raise Refused(f"the variants' file lists differ between {old_rev[:12]} and the working tree: "
                          "not a comment-only change")
        files = sorted({f for fs in new_lists.values() for f in fs})
        old_c, new_c = {}, {}
        for f in files:
            old_c[f], new_c[f] = read_at(repo, old_rev, repo_path(f)), read_at(repo, None, repo_path(f))
            if old_c[f] is None or new_c[f] is None:
                raise Refused(f"{repo_path(f)} is missing at {'the working tree' if new_c[f] is None else old_rev[:12]}")
        changed = [f for f in files if old_c[f] != new_c[f]]
        diffs = [d for d in (code_difference(gcc, repo_path(f), old_c[f], new_c[f]) for f in changed) if d]
        if diffs:
            for d in diffs:
                print(f"rekey_approvals: {d}", file=sys.stderr)
            raise Refused(f"{len(diffs)} of {len(changed)} changed files differ in code, not only in comments")
        hashes = {v: (manifest_hash(fs, old_c), manifest_hash(fs, new_c)) for v, fs in new_lists.items()}
        print(f"old commit {old_rev[:12]}; files changed in comments only: "
              + (", ".join(repo_path(f) for f in changed) if changed else "none"))
        for v, (o, n) in hashes.items():
            print(f"  {v}: {o[:12]} -> {n[:12]}" if o != n else f"  {v}: {o[:12]} (unchanged)")
        results = {p: rekey_text(p, texts[p], hashes, key) + (key,) for p, key in inputs}
    except Refused as e:
        print(f"rekey_approvals: refused: {e}; nothing written", file=sys.stderr)
        return 1
    except Unusable as e:
        print(f"rekey_approvals: {e}", file=sys.stderr)
        return 2
    for p, (out, done, kept, key) in results.items():
        current = sum(1 for a in kept if a.get("variant") in hashes and a.get("source_sha256") == hashes[a["variant"]][1])
        print(f"{p}: {len(done)} {key} re-keyed, {current} already current, "
              f"{len(kept) - current} keyed by other hashes left as they are")
        for a, o, n in done:
            print(f"  {describe(a)}: {o[:12]} -> {n[:12]}")
    if args.dry_run:
        print("dry run: nothing written")
        return 0
    try:
        write_all({p: out for p, (out, done, _, _) in results.items() if done})
    except OSError as e:
        print(f"rekey_approvals: {e.strerror}", file=sys.stderr)
        return 2
    del locks
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
