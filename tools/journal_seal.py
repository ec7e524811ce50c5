"""The seal a gate journal line ends in, checked and written as the gate
does (journal_line and parse_journal_line, gate/src/journal.cpp; the rules
are in gate/include/normgate/gate/journal.h).

A line ends in ,"sha256":"<64 hex>"} (the SHA-256 of the line without that
member) or, written under a journal key, ,"hmac_sha256":"<64 hex>"} (the
HMAC-SHA256 under the key). The key is the file NORMGATE_JOURNAL_KEY_FILE
names, as in the gate: its bytes without trailing newlines, at least 32,
the file not readable or writable by every user. With a key only keyed
lines pass; without one a keyed line cannot be checked and does not pass.
In format 3 every record line holds "prev", the seal of the line before it
(CHAIN)."""
import hashlib
import hmac
import os
import re
import stat

ENV = "NORMGATE_JOURNAL_KEY_FILE"
MIN_KEY_BYTES = 32
SEAL = re.compile(r',"(sha256|hmac_sha256)":"([0-9a-f]{64})"\}$')
FORMAT = 3
# A record's chain member as the gate writes it (keys sorted, no spaces): in
# a JSON text a '"' inside a string is escaped, so this matches the member only.
CHAIN = re.compile(r'"prev":"([0-9a-f]{64})"')

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


def seal_of(line):
    """The 64 hex digits of the seal a line ends in (unchecked): what the
    next record's "prev" holds; None when the line ends in no seal member."""
    m = SEAL.search(line)
    return m.group(2) if m else None


def _digest(text, key):
    """The hex seal of the unsealed JSON text: HMAC-SHA256 under `key` when
    it is non-empty, else SHA-256 (journal_line, gate/src/journal.cpp)."""
    data = text.encode("utf-8")
    return hmac.new(key, data, hashlib.sha256).hexdigest() if key else hashlib.sha256(data).hexdigest()


def unsealed(line):
    """The line's JSON text without its seal member (unchecked), or None when
    it ends in none: the bytes its seal covers."""
    m = SEAL.search(line)
    return line[:m.start()] + "}" if m and m.start() >= 2 else None


def seal(text):
    """The journal line for the JSON object text `text` (no newline): the
    seal member appended before its closing brace, as the gate's
    journal_line does: "hmac_sha256" under the journal key when one is set,
    else "sha256"."""
    if not text.endswith("}") or len(text) < 3:
        raise ValueError("seal: not the text of a JSON object with members")
    key = journal_key()
    return text[:-1] + ',"' + ("hmac_sha256" if key else "sha256") + '":"' + _digest(text, key) + '"}'


def why_not(line):
    """Why the line's seal does not hold, in the gate's words (naming the key
    setting where that is the cause), or None when it holds."""
    m = SEAL.search(line)
    if not m or m.start() < 2:
        return 'the line does not end in its seal member (,"sha256":"<64 hex>"} or ,"hmac_sha256":"<64 hex>"})'
    key = journal_key()
    if m.group(1) == "hmac_sha256" and not key:
        return f"the line is sealed with a journal key (hmac_sha256); set {ENV} to the file of the key it was written with"
    if m.group(1) == "sha256" and key:
        return (f"the line is sealed with a plain SHA-256, which anyone can recompute, not with the journal key ({ENV} "
                f"is set): a journal written without the key, or a line rewritten")
    if body(line) is None:
        return (f"the line's HMAC-SHA256 does not match its content under the key {ENV} names (it was written with "
                f"another key, or changed after normgate wrote it)" if key else
                "the line's SHA-256 digest does not match its content (it was changed after normgate wrote it)")
    return None


def sealed_shape(line):
    """Whether the line ends in a seal member (whatever its digest)."""
    return SEAL.search(line) is not None


def body(line):
    """The line's JSON text without its seal member when the seal holds
    (under the journal key if one is set, else plain SHA-256), or None."""
    m = SEAL.search(line)
    text = unsealed(line)
    if text is None:
        return None
    key = journal_key()
    # a keyed seal needs the key; a plain one is refused while a key is set
    if (m.group(1) == "hmac_sha256") != bool(key):
        return None
    return text if hmac.compare_digest(_digest(text, key), m.group(2)) else None
