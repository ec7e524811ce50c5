"""Saved cases (normgate-case/2 HDF5 files, datasets/SCHEMA.md) from Python.

`normgate repro CASE --variant V --save DIR/` writes one; load_case reads it
back with h5py, checks its content digest (/@content_sha256, over every
attribute and dataset) and its inputs' SHA-256 exactly as `normgate repro
--file` does, and returns its tensors and metadata. content_sha256(f)
computes the content digest of any open normgate HDF5 file (case or maps).
Needs h5py and numpy, not the normgate library; torch is used when it is
importable.
"""

import hashlib
import os
import stat

__all__ = ["load_case", "content_sha256", "CaseDigestError", "CaseContentError", "CASE_SCHEMA"]

CASE_SCHEMA = "normgate-case/2"
# Schemas written before the content digest: refused (SCHEMA.md says how to upgrade).
_OLD_SCHEMAS = ("normgate-case/1", "normgate-maps/1")
# Stored element types the manifest knows (little-endian), by numpy's dtype.str.
_TYPES = {"<u2": "u16", "<i8": "i64", "<f4": "f32", "<f8": "f64"}

_HEADS = {"heads24": 24, "heads4": 4}
# Inputs in the order their bytes are hashed (seeds::digest "all": x, dy, w,
# then u, dh_new for form res). /inputs/x holds h for form res.
_DIGEST_ORDER = ("x", "dy", "w", "u", "dh_new")
_ROW_TENSORS = ("x", "dy", "u", "dh_new", "y", "dx", "h_new")


class CaseDigestError(ValueError):
    """The inputs of a case file do not hash to the SHA-256 it records
    (modified inputs). `expected` is the recorded digest, `found` the one of
    the stored bytes, `path` the file."""

    def __init__(self, path, expected, found):
        self.path, self.expected, self.found = path, expected, found
        super().__init__("%s: the inputs' SHA-256 is %s but the file records %s (modified inputs)"
                         % (path, found, expected))


class CaseContentError(ValueError):
    """The attributes and datasets of a normgate HDF5 file do not hash to the
    /@content_sha256 it records (modified or damaged after it was written),
    or the file holds an item the digest cannot cover. `expected` is the
    recorded digest, `found` the computed one ("" when none could be),
    `path` the file."""

    def __init__(self, path, expected, found, why=None):
        self.path, self.expected, self.found = path, expected, found
        super().__init__(why or ("%s: content SHA-256 mismatch: the file records %s, its attributes and datasets "
                                 "hash to %s (modified or damaged after it was written)" % (path, expected, found)))


def _plain(name):
    return all(" " < c < "\x7f" for c in name)


def content_sha256(f, path=None):
    """The content digest of an open h5py File (datasets/SCHEMA.md, "Content
    digest"): the SHA-256 of one manifest line per attribute (but
    /@content_sha256) and per dataset, sorted by key,
    "TYPE DIMS SHA256(VALUE) KEY\n" with KEY "/path" (dataset) or
    "/path@name" ("/@name" on the root), TYPE str|u16|i64|f32|f64, DIMS "-"
    for a (scalar) attribute, else the dims joined by "x", VALUE the
    little-endian elements (a string: its stored bytes without trailing NULs).
    An item of another type, a non-scalar attribute, a name with spaces or
    control characters, or a dataset that declares more data than the file
    stores (_check_sizes: checked before any dataset is read) raises
    CaseContentError."""
    import h5py
    import numpy as np
    path = path or f.filename
    _check_sizes(f, path)

    def bad(why):
        raise CaseContentError(path, "", "", "%s: %s" % (path, why))

    lines = {}

    def add(key, type_, dims, data):
        if not _plain(key):
            bad("the name %r has spaces or control characters" % key)
        # '@' separates object and attribute: a dataset named /maps@rows
        # would take the key of /maps's attribute rows.
        if key.count("@") != (1 if dims == "-" else 0):
            bad("the name %r holds '@' (an object or attribute name may not)" % key)
        lines[key] = "%s %s %s %s\n" % (type_, dims, hashlib.sha256(data).hexdigest(), key)

    def attrs_of(obj):
        for name in obj.attrs:
            key = ("/" if obj.name == "/" else obj.name) + "@" + name
            if key == "/@content_sha256":
                continue
            aid = obj.attrs.get_id(name)
            if aid.shape != ():
                bad("attribute %s is not a scalar" % key)
            dt = aid.dtype
            if dt.kind == "S":
                v = obj.attrs[name]
                add(key, "str", "-", bytes(v).rstrip(b"\0"))
            elif dt.str in _TYPES:
                add(key, _TYPES[dt.str], "-", np.asarray(obj.attrs[name], dtype=dt).tobytes())
            else:
                bad("attribute %s is stored as %s, not one of str, u16, i64, f32, f64" % (key, dt))

    def visit(name, obj):
        attrs_of(obj)
        if isinstance(obj, h5py.Dataset):
            key = "/" + name
            if obj.dtype.str not in _TYPES:
                bad("dataset %s is stored as %s, not one of u16, i64, f32, f64" % (key, obj.dtype))
            data = np.ascontiguousarray(obj[()]).tobytes() if obj.size else b""
            add(key, _TYPES[obj.dtype.str], "x".join(str(d) for d in obj.shape), data)
        elif not isinstance(obj, h5py.Group):
            bad("object /%s is neither a group nor a dataset" % name)

    attrs_of(f)
    f.visititems(visit)
    return hashlib.sha256("".join(lines[k] for k in sorted(lines)).encode()).hexdigest()


# deflate (the writer's filter, with shuffle and Fletcher-32) shrinks data at
# most about 1032:1 (an all-zero 1 MiB chunk stores ~1 KiB): a dataset that
# declares more than this times its stored bytes (plus 1 MiB) is not data the
# file holds (no chunk written at all: every element a fill value).
_MAX_STORED_RATIO = 1100
_SLACK_BYTES = 1 << 20


def _host_memory():
    """Bytes of memory this process may use: the physical memory, or a smaller
    cgroup limit (v2 memory.max, v1 memory.limit_in_bytes); 0 when unknown."""
    have = 0
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        pass
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(f) as fh:
                v = int(fh.read(64).strip())
        except (OSError, ValueError):  # absent, unreadable, or "max"
            continue
        if 0 < v < (1 << 62) and (have == 0 or v < have):
            have = v
    return max(have, 0)


def _check_sizes(f, path=None):
    """CaseContentError naming the file, the dataset and its shape unless every
    dataset of the open h5py File f is backed by the bytes the file stores
    (its declared size at most _MAX_STORED_RATIO times its stored bytes, plus
    1 MiB), and all of them together fit in this host's memory. Reads no
    data: a crafted 16 KB file declaring [2^31, 16384] datasets with no chunk
    written would otherwise be allocated in full (numpy's MemoryError, or
    gigabytes filled with fill values) before its digest could fail."""
    import h5py
    path = path or f.filename
    found = []  # (declared bytes, name, shape)

    def visit(name, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        shape = tuple(int(d) for d in (obj.shape or ()))
        n = obj.dtype.itemsize
        for d in shape:
            n *= d
        if n == 0:
            return
        try:
            stored = int(obj.id.get_storage_size())
        except (OSError, RuntimeError, ValueError):
            stored = 0
        if n > _MAX_STORED_RATIO * stored + _SLACK_BYTES:
            raise CaseContentError(path, "", "", "%s: dataset /%s declares shape %s (%d bytes) but the file stores "
                                   "only %d bytes of it (damaged or crafted: refused before reading it)"
                                   % (path, name, list(shape), n, stored))
        found.append((n, name, shape))

    f.visititems(visit)
    total = sum(n for n, _, _ in found)
    have = _host_memory()
    if found and have and total > have:
        n, name, shape = max(found)
        raise CaseContentError(path, "", "", "%s: the datasets declare %d bytes in all (the largest /%s, shape %s: "
                               "%d bytes), more than this host's %d bytes of memory"
                               % (path, total, name, list(shape), n, have))


def verify_content(f, path):
    """Raise CaseContentError unless f's /@content_sha256 is its content
    digest (the datasets' declared sizes are checked first: _check_sizes)."""
    expected = _text(f.attrs.get("content_sha256", b""), errors="replace")
    if not expected:
        raise CaseContentError(path, "", "", "%s: attribute /@content_sha256 is missing" % path)
    found = content_sha256(f, path)
    if found != expected:
        raise CaseContentError(path, expected, found)


def _text(v, errors="strict"):
    return v.decode("utf-8", errors) if isinstance(v, bytes) else str(v)


def _attr_text(v, path, where):
    """An attribute's value as str; CaseContentError naming the file and the
    attribute when its bytes are not UTF-8 text."""
    try:
        return _text(v)
    except UnicodeDecodeError as e:
        raise CaseContentError(path, "", "", "%s: attribute %s is not UTF-8 text (%s)" % (path, where, e)) from None


def _parse_case_id(case_id, path):
    kv = {}
    for part in case_id.split(","):
        k, sep, v = part.partition("=")
        if not sep:
            raise ValueError("%s: attribute /@case_id '%s' is not a case id (term '%s' has no '=')"
                             % (path, case_id, part))
        kv[k] = v
    try:
        T, H = int(kv["T"]), int(kv["H"])
        w = kv["w"]
    except (KeyError, ValueError):
        raise ValueError("%s: attribute /@case_id '%s' lacks a valid T, H or w" % (path, case_id)) from None
    form = kv.get("form", "plain")
    if w not in ("bf16", "fp32") or form not in ("plain", "res", "heads24", "heads4"):
        raise ValueError("%s: attribute /@case_id '%s': unknown w '%s' or form '%s'" % (path, case_id, w, form))
    if T < 0 or H < 1:
        raise ValueError("%s: attribute /@case_id '%s': T = %d, H = %d (want T >= 0, H >= 1)" % (path, case_id, T, H))
    try:
        eps = float(kv.get("eps", "1e-6"))
    except ValueError:
        raise ValueError("%s: attribute /@case_id '%s': eps '%s' is not a number"
                         % (path, case_id, kv["eps"])) from None
    return {"T": T, "H": H, "w": w, "form": form, "heads": _HEADS.get(form, 1), "eps": eps}


def _want_torch(as_torch):
    if as_torch is False:
        return None
    try:
        import torch
    except ImportError:
        if as_torch:
            raise RuntimeError("load_case(as_torch=True) needs torch (pip install torch)") from None
        return None
    return torch


def load_case(path, as_torch=None):
    """Read a saved case (schema normgate-case/1) and verify its inputs.

    The content digest (content_sha256: every attribute and dataset) must
    equal the file's /@content_sha256, else CaseContentError (a ValueError)
    naming both: a changed case id, verdict or value is never returned. The
    inputs' SHA-256 (the little-endian bytes of x, dy, w, then u and dh_new
    for form res, concatenated: what `normgate case ID` prints as "all" and
    `normgate repro --file` checks) must equal the file's /@inputs_sha256,
    else CaseDigestError (a ValueError) naming both. A file of another schema
    (normgate-case/1 included: it has no content digest), or whose datasets do
    not have the case's shapes, is a ValueError; a damaged dataset (Fletcher-32
    or a metadata checksum) is CaseContentError naming the file; a missing
    file is FileNotFoundError.

    as_torch: None (default) uses torch when it is importable, True requires
    it, False never uses it.

    Returns a dict:
      "case": the case id; "T", "H", "heads" (1, 24 or 4), "form", "w" ("bf16"
          or "fp32"), "eps": as in normgate.generate();
      "inputs": x (h for form res, as generate() names it), dy, w, and u,
          dh_new for form res;
      "outputs": what the recording implementation returned: y, rstd, dx, dw,
          and h_new for form res;
      "reference": the oracle's rstd, rstd_bound, dw, dw_bound (float64);
      "maps": the error maps (/maps: dw_ratio, rstd_ratio, y_tiles, ...) and
          their attributes rows, cols, tile;
      "meta": every attribute of / as str: schema, case_id, impl, impl_sha256,
          fwd, fwd_sha256, backend, oracle, escalations, verdict, budgets,
          inputs_sha256, gpu, driver, cuda, normgate_version, normgate_commit,
          date, ...;
      "tensors": "torch" or "numpy";
      "bf16": the tensors that are BF16, as "group/name" ("inputs/x",
          "outputs/y", ...).
    Shapes: [T, H] rows, or [T, heads, 256] for the head forms; rstd [T] or
    [T, heads]; w and dw [H]. With torch every tensor is a CPU torch tensor and
    the BF16 ones are torch.bfloat16 (the stored bits, unchanged); without
    torch they are numpy arrays and the BF16 ones hold their raw bits as
    uint16 (the names in "bf16" say which).
    """
    try:
        import h5py
        import numpy as np
    except ImportError as e:
        raise ImportError("normgate.load_case needs h5py and numpy (pip install h5py): %s" % e) from e
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError("load_case: path must be a file path, got %r" % (path,))
    path = os.fsdecode(path)  # str(b"x.h5") would be "b'x.h5'"
    # A FIFO or a device would block the open (h5py waits for a writer);
    # a folder is no case file either.
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError("load_case: %s: no such file" % path) from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("load_case: %s is not a regular file (%s)"
                         % (path, "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO, socket or device"))
    torch = _want_torch(as_torch)

    def group_items(f, group):
        if group not in f or not isinstance(f[group], h5py.Group):
            raise ValueError("%s: group /%s is missing (not a case file)" % (path, group))
        for name, ds in f[group].items():
            if not isinstance(ds, h5py.Dataset):
                raise ValueError("%s: /%s/%s is not a dataset" % (path, group, name))
            yield name, ds

    def read():
        with h5py.File(path, "r") as f:
            # Only the schema before the digest (nothing else is trusted, or
            # decoded, until the content digest matches).
            schema = _text(f.attrs.get("schema", b""), errors="replace")
            if schema in _OLD_SCHEMAS:
                raise ValueError("%s: schema '%s' was written before content digests and is no longer read; write it "
                                 "again (normgate repro CASE_ID --variant V --save NEW.h5), or upgrade a file whose "
                                 "history you trust: normgate inspect FILE --upgrade NEW.h5 (datasets/SCHEMA.md)"
                                 % (path, schema))
            if schema != CASE_SCHEMA:
                raise ValueError("%s: schema '%s', expected '%s' (a case file written by normgate repro --save)"
                                 % (path, schema, CASE_SCHEMA))
            verify_content(f, path)  # the datasets' declared sizes first, then every byte
            meta = {k: _attr_text(v, path, "/@" + k) for k, v in f.attrs.items()}
            c = _parse_case_id(meta.get("case_id", ""), path)
            rows, H = c["T"] * c["heads"], c["H"]
            arrays, bf16 = {}, []
            for group in ("inputs", "outputs", "reference"):
                for name, ds in group_items(f, group):
                    key = group + "/" + name
                    arrays[key] = ds[()]
                    if _attr_text(ds.attrs.get("dtype", ""), path, "/%s@dtype" % key) == "bf16":
                        if arrays[key].dtype != np.uint16:
                            raise ValueError("%s: dataset %s is marked bf16 but stored as %s, not uint16"
                                             % (path, key, arrays[key].dtype))
                        bf16.append(key)
            maps = {}
            if "maps" in f:
                maps = {name: ds[()] for name, ds in group_items(f, "maps")}
                for k, v in f["maps"].attrs.items():
                    a = np.asarray(v)
                    if a.shape != () or a.dtype.kind not in "iu":
                        raise ValueError("%s: attribute /maps@%s is not an integer" % (path, k))
                    maps[k] = int(a)

        return meta, c, rows, H, arrays, bf16, maps

    try:
        meta, c, rows, H, arrays, bf16, maps = read()
    except (OSError, KeyError, RuntimeError, TypeError, AttributeError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        # A damaged dataset (its Fletcher-32 or a metadata checksum fails:
        # h5py raises OSError, KeyError opening a damaged object, RuntimeError
        # visiting one) or a file HDF5 cannot parse: name the file, as the
        # CLI does.
        raise CaseContentError(path, "", "", "%s: damaged or not a case file, HDF5 cannot read it: %s"
                               % (path, e)) from e
    except ValueError as e:
        if path in str(e):  # this module's refusals (CaseContentError among them) name the file already
            raise
        # h5py's or numpy's own ValueError on a damaged file: name the file.
        raise CaseContentError(path, "", "", "%s: damaged or not a case file, HDF5 cannot read it: %s"
                               % (path, e)) from e
    except MemoryError as e:  # _check_sizes bounds the datasets; a file that still does not fit: name it
        raise CaseContentError(path, "", "", "%s: not enough memory to read it (%s)" % (path, e)) from e

    res = c["form"] == "res"
    want = {"inputs/x": (rows, H), "inputs/dy": (rows, H), "inputs/w": (H,), "outputs/y": (rows, H),
            "outputs/dx": (rows, H), "outputs/rstd": (rows,), "outputs/dw": (H,),
            "reference/rstd": (rows,), "reference/rstd_bound": (rows,), "reference/dw": (H,),
            "reference/dw_bound": (H,)}
    if res:
        want.update({"inputs/u": (rows, H), "inputs/dh_new": (rows, H), "outputs/h_new": (rows, H)})
    for key, shape in want.items():
        if key not in arrays:
            raise ValueError("%s: no dataset %s (case %s)" % (path, key, meta["case_id"]))
        if tuple(arrays[key].shape) != shape:
            raise ValueError("%s: dataset %s has shape %s, case %s needs %s"
                             % (path, key, tuple(arrays[key].shape), meta["case_id"], shape))
    w_type = np.uint16 if c["w"] == "bf16" else np.float32
    if arrays["inputs/w"].dtype != w_type:
        raise ValueError("%s: dataset inputs/w is %s, case %s has w=%s"
                         % (path, arrays["inputs/w"].dtype, meta["case_id"], c["w"]))

    h = hashlib.sha256()
    for name in _DIGEST_ORDER:
        a = arrays.get("inputs/" + name)
        if a is not None:
            h.update(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    found, expected = h.hexdigest(), meta.get("inputs_sha256", "")
    if found != expected:
        raise CaseDigestError(path, expected, found)

    heads = c["heads"]

    def shaped(key, a):
        name = key.split("/", 1)[1]
        if heads > 1 and name in _ROW_TENSORS:
            a = a.reshape(c["T"], heads, H)
        elif heads > 1 and name in ("rstd", "rstd_bound"):
            a = a.reshape(c["T"], heads)
        if torch is None:
            return a
        a = np.ascontiguousarray(a)
        if key in bf16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)

    out = {k: c[k] for k in ("T", "H", "heads", "form", "w", "eps")}
    out["case"] = meta["case_id"]
    for group in ("inputs", "outputs", "reference"):
        out[group] = {}
        for key, a in arrays.items():
            if key.startswith(group + "/"):
                name = key.split("/", 1)[1]
                if group == "inputs" and name == "x" and res:
                    name = "h"
                out[group][name] = shaped(key, a)
    out["maps"] = {k: (torch.from_numpy(np.ascontiguousarray(v)) if torch is not None and isinstance(v, np.ndarray)
                       else v) for k, v in maps.items()}
    out["meta"] = meta
    out["tensors"] = "numpy" if torch is None else "torch"
    out["bf16"] = sorted("inputs/h" if k == "inputs/x" and res else k for k in bf16)
    return out
