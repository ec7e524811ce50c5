"""The output file of the summary tools (journal_summary.py,
campaign_summary.py): checked before any work, written atomically.

check_out(prog, path, inputs): the file to write for `path`, or exit 2 with
one line naming it: "" or "-" (no stdout output here), a folder, an existing
path that is not a regular file (a device such as /dev/null, a FIFO: the
rename would replace it), or one of `inputs`. A link is written through (its
target is returned), never replaced.

write_text(prog, path, text): `text` into a temporary beside `path` (mode
0666 less the umask), then renamed over it; exit 3 with one line (the
temporary removed) when that fails, e.g. on a full disk."""
import os
import stat
import sys
import tempfile


def _die(prog, msg, code):
    print(f"{prog}: {msg}", file=sys.stderr)
    sys.exit(code)


def check_out(prog, path, inputs=()):
    if path in ("", "-"):
        _die(prog, f"--md {path!r}: give a file (the table goes to stdout anyway)", 2)
    real = os.path.realpath(path)  # through links (a dangling one: its target)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        _die(prog, f"--md {path!r}: {e.strerror}", 2)
    if st is not None and stat.S_ISDIR(st.st_mode):
        _die(prog, f"--md {path!r} is a folder (give a file name)", 2)
    if st is not None and not stat.S_ISREG(st.st_mode):
        _die(prog, f"--md {path!r} exists and is not a regular file (a device, FIFO or socket)", 2)
    if not os.path.isdir(os.path.dirname(real) or "."):
        _die(prog, f"--md {path!r}: folder {os.path.dirname(real)!r} does not exist", 2)
    for p in inputs:
        if p and os.path.exists(p) and (os.path.realpath(p) == real or (st is not None and os.path.samefile(p, real))):
            _die(prog, f"--md {path!r} is the input {p!r}: writing it would destroy what this reads; give another "
                       "file", 2)
    return real


def write_text(prog, path, text):
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix="." + prog + ".")
        m = os.umask(0)
        os.umask(m)
        os.fchmod(fd, 0o666 & ~m)  # mkstemp makes 0600
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        _die(prog, f"cannot write --md {path!r}: {e}", 3)
