"""The "format" field of normgate's JSON documents, for the tools that read
them: "NAME/MAJOR", e.g. "normgate-gate-report/2" (docs/schemas.md; the C++
readers use core/include/normgate/core/doc_format.h, the same rules).

Imported by the tools beside it (they run as scripts from tools/)."""

import re

_FORMAT = re.compile(r"(.+)/([0-9]+)")  # fullmatch: "$" would take a trailing newline


def format_version(doc, names, major=2):
    """The major version of document `doc` (parsed JSON) of one of the kinds
    `names`, or 0 for an object without "format" (a document written before
    normgate versioned them; its fields are version 1's). Raises ValueError
    saying why when "format" is not "NAME/MAJOR", names another kind, or has a
    major version this reader does not know (0, or above `major`)."""
    kinds = " or ".join("%s/%d" % (n, major) for n in names)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object (expected %s)" % kinds)
    if "format" not in doc:
        return 0
    f = doc["format"]
    m = _FORMAT.fullmatch(f) if isinstance(f, str) else None
    if m is None:
        raise ValueError("format %r is not NAME/MAJOR (expected %s)" % (f, kinds))
    if m.group(1) not in names:
        raise ValueError("format %r is another kind of document (expected %s)" % (f, kinds))
    v = int(m.group(2))
    if v < 1 or v > major:
        raise ValueError("format %r: major version %d is unknown to this tool, which reads %s" % (f, v, kinds))
    return v
