"""Saved cases (normgate-case/1 HDF5 files, datasets/SCHEMA.md) from Python.

`normgate repro CASE --variant V --save DIR/` writes one; load_case reads it
back with h5py, checks its inputs' SHA-256 exactly as `normgate repro --file`
does, and returns its tensors and metadata. Needs h5py and numpy, not the
normgate library; torch is used when it is importable.
"""

import hashlib
import os

__all__ = ["load_case", "CaseDigestError", "CASE_SCHEMA"]

CASE_SCHEMA = "normgate-case/1"

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


def _text(v):
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


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
    return {"T": T, "H": H, "w": w, "form": form, "heads": _HEADS.get(form, 1),
            "eps": float(kv.get("eps", "1e-6"))}


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

    The inputs' SHA-256 (the little-endian bytes of x, dy, w, then u and
    dh_new for form res, concatenated: what `normgate case ID` prints as
    "all" and `normgate repro --file` checks) must equal the file's
    /@inputs_sha256, else CaseDigestError (a ValueError) naming both. A file
    of another schema, or whose datasets do not have the case's shapes, is a
    ValueError; a damaged dataset (Fletcher-32 checksum) is h5py's OSError.

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
    path = str(path)
    torch = _want_torch(as_torch)
    with h5py.File(path, "r") as f:
        meta = {k: _text(v) for k, v in f.attrs.items()}
        if meta.get("schema") != CASE_SCHEMA:
            raise ValueError("%s: schema '%s', expected '%s' (a case file written by normgate repro --save)"
                             % (path, meta.get("schema", ""), CASE_SCHEMA))
        c = _parse_case_id(meta.get("case_id", ""), path)
        rows, H = c["T"] * c["heads"], c["H"]
        arrays, bf16 = {}, []
        for group in ("inputs", "outputs", "reference"):
            for name, ds in f[group].items():
                key = group + "/" + name
                arrays[key] = ds[()]
                if _text(ds.attrs.get("dtype", "")) == "bf16":
                    if arrays[key].dtype != np.uint16:
                        raise ValueError("%s: dataset %s is marked bf16 but stored as %s, not uint16"
                                         % (path, key, arrays[key].dtype))
                    bf16.append(key)
        maps = {name: ds[()] for name, ds in f["maps"].items()} if "maps" in f else {}
        if "maps" in f:
            maps.update({k: int(v) for k, v in f["maps"].attrs.items()})

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
