"""The seal a gate journal line ends in, checked as the gate checks it
(journal_line and parse_journal_line, gate/src/journal.cpp; the rules are in
gate/include/normgate/gate/journal.h).

A line ends in ,"sha256":"<64 hex>"} (the SHA-256 of the line without that
member) or, written under a journal key, ,"hmac_sha256":"<64 hex>"} (the
HMAC-SHA256 under the key). The key is the file NORMGATE_JOURNAL_KEY_FILE
names, as in the gate: its bytes without trailing newlines, at least 32,
the file not readable or writable by every user. With a key only keyed
lines pass; without one a keyed line cannot be checked and does not pass."""
import hashlib
import hmac
import os
import re
import stat

ENV = "NORMGATE_JOURNAL_KEY_FILE"
MIN_KEY_BYTES = 32
SEAL = re.compile(r',"(sha256|hmac_sha256)":"([0-9a-f]{64})"\}$')

_key = None


class KeyError_(ValueError):
    """NORMGATE_JOURNAL_KEY_FILE names a file the gate would refuse."""


def journal_key():
    """The key's bytes, or b"" when NORMGATE_JOURNAL_KEY_FILE is unset or
    empty. Raises KeyError_ naming the variable and the file when the gate
    would refuse it."""
    global _key
    if _key is None:
        path = os.environ.get(ENV, "")
        key = b""
        if path:
            where = f"{ENV}: journal key file '{path}'"
            try:
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode):
                    raise KeyError_(f"{where}: not a regular file")
                if st.st_mode & (stat.S_IROTH | stat.S_IWOTH):
                    raise KeyError_(f"{where}: readable or writable by every user (mode {st.st_mode & 0o777:03o}): "
                                    "chmod o-rw it")
                with open(path, "rb") as f:
                    key = f.read(4097)
            except OSError as e:
                raise KeyError_(f"{where}: {e.strerror}") from None
            if len(key) > 4096:
                raise KeyError_(f"{where}: over 4096 bytes")
            key = key.rstrip(b"\r\n")
            if len(key) < MIN_KEY_BYTES:
                raise KeyError_(f"{where}: {len(key)} bytes (line ends not counted); a journal key needs at least "
                                f"{MIN_KEY_BYTES}")
        _key = key
    return _key


def sealed_shape(line):
    """Whether the line ends in a seal member (whatever its digest)."""
    return SEAL.search(line) is not None


def body(line):
    """The line's JSON text without its seal member when the seal holds
    (under the journal key if one is set, else plain SHA-256), or None."""
    m = SEAL.search(line)
    if not m or m.start() < 2:
        return None
    text = line[:m.start()] + "}"
    data = text.encode("utf-8")
    key = journal_key()
    if m.group(1) == "hmac_sha256":
        if not key:
            return None
        good = hmac.new(key, data, hashlib.sha256).hexdigest()
    else:
        if key:
            return None
        good = hashlib.sha256(data).hexdigest()
    return text if hmac.compare_digest(good, m.group(2)) else None
