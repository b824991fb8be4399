"""Result bundles on disk: one directory per (test, rank) holding ``manifest.json`` and one tensor file.

Layout written by the recorder: ``ROOT/<test name>/rank<r>/{manifest.json, tensors.safetensors}``.  The tensor file
is safetensors (or ``.npz``, written with ``np.savez`` and read with ``allow_pickle=False``); the manifest is JSON and
lists every tensor in execution order with its dtype, shape and SHA-256 of its bytes, plus the SHA-256 and size of
the whole tensor file.  The manifest is written last, so a bundle with a manifest is complete.

Reading never unpickles: safetensors is parsed here from its header (8-byte little-endian length, JSON, raw data),
``.npz`` members are checked to be plain ``.npy`` arrays with no object dtype before ``np.load(allow_pickle=False)``,
and a bundle holding a pickle, a ``torch.save`` archive or any file with a pickle suffix is refused.  Sizes are
bounded before anything is read: the manifest (64 MiB), the safetensors header (100 MB, safetensors' own limit) and
the tensor file (``max_bytes``, 4 GiB unless given).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import zipfile

import numpy as np
import torch

from ..fileio import atomic_write as _atomic_write

FORMAT = "trnsim-difftest-bundle"
VERSION = 1
MANIFEST = "manifest.json"
DEFAULT_MAX_BYTES = 4 << 30          # a tensor file larger than 4 GiB is refused unless max_bytes says otherwise
MAX_MANIFEST_BYTES = 64 << 20
MAX_HEADER_BYTES = 100_000_000       # the safetensors format's own header limit (safetensors README, "Format")
PICKLE_SUFFIXES = (".pkl", ".pickle", ".pt", ".pth", ".bin", ".ckpt", ".joblib", ".tar")

# safetensors dtype codes <-> torch dtypes
_ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
}
_ST_NAME = {v: k for k, v in _ST_DTYPES.items()}
# npz: dtypes NumPy lacks are stored as unsigned integers of the same width and viewed back on load
_NPZ_RAW = {torch.bfloat16: torch.uint16, torch.float8_e4m3fn: torch.uint8, torch.float8_e5m2: torch.uint8}


class BundleError(Exception):
    """A bundle that cannot be trusted or read: missing, corrupt, truncated, oversize, pickle-bearing, malformed."""


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def torch_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise BundleError(f"unknown dtype {name!r}")
    return dt


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw little-endian bytes of a contiguous CPU tensor."""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (``trnsim.fileio.atomic_write``)."""
    with _atomic_write(path, "wb") as f:
        f.write(data)


def safe_dirname(name: str) -> str:
    """A folder name for a test name or pytest node id."""
    s = re.sub(r"[^A-Za-z0-9._\-\[\]=]+", "_", name).strip("._")
    return s[:200] or "test"


# -- writing ----------------------------------------------------------------------------------------
def write_bundle(path: str, manifest: dict, tensors: dict, fmt: str = "safetensors") -> str:
    """Write ``tensors`` (store name -> contiguous CPU tensor) and ``manifest`` into folder ``path``."""
    if fmt == "safetensors":
        from safetensors.torch import save
        fname = "tensors.safetensors"
        data = save(dict(tensors)) if tensors else _empty_safetensors()
    elif fmt == "npz":
        fname = "tensors.npz"
        buf = io.BytesIO()
        np.savez(buf, **{k: (v.view(_NPZ_RAW[v.dtype]) if v.dtype in _NPZ_RAW else v).numpy()
                         for k, v in tensors.items()})
        data = buf.getvalue()
    else:
        raise ValueError(f"bundle format {fmt!r}: expected 'safetensors' or 'npz'")
    man = dict(manifest)
    man.update(format=FORMAT, version=VERSION, tensor_file=fname, tensor_file_bytes=len(data),
               tensor_file_sha256=sha256(data))
    os.makedirs(path, exist_ok=True)
    for other in ("tensors.safetensors", "tensors.npz"):
        if other != fname and os.path.exists(os.path.join(path, other)):
            os.unlink(os.path.join(path, other))
    atomic_write(os.path.join(path, fname), data)
    atomic_write(os.path.join(path, MANIFEST), json.dumps(man, indent=1, sort_keys=False).encode())
    return path


def _empty_safetensors() -> bytes:
    head = b"{}"
    return struct.pack("<Q", len(head)) + head


# -- reading ----------------------------------------------------------------------------------------
class Bundle:
    """A validated bundle: ``manifest``, ``entries`` (execution order) and ``tensor(key)`` (CPU tensors)."""

    def __init__(self, path, manifest, tensors):
        self.path = path
        self.manifest = manifest
        self.entries = sorted(manifest["entries"], key=lambda e: e["seq"])
        self.by_key = {e["key"]: e for e in self.entries}
        self._tensors = tensors

    @property
    def name(self):
        return self.manifest.get("name", "")

    @property
    def rank(self):
        return int(self.manifest.get("rank", 0))

    def tensor(self, key) -> torch.Tensor:
        return self._tensors[self.by_key[key]["store"]]

    def __repr__(self):
        return f"Bundle({self.path!r}, name={self.name!r}, rank={self.rank}, {len(self.entries)} tensors)"


def find_bundles(root: str) -> list:
    """Every bundle folder (one with a ``manifest.json``) at or under ``root``, sorted."""
    if not os.path.exists(root):
        raise BundleError(f"{root}: no such file or folder")
    if os.path.isfile(root):
        if os.path.basename(root) == MANIFEST:
            return [os.path.dirname(os.path.abspath(root))]
        raise BundleError(f"{root}: is a file; give a bundle folder (one holding {MANIFEST}) or a folder of them")
    found = []
    for d, _dirs, files in os.walk(root):
        _dirs.sort()
        if MANIFEST in files:
            found.append(d)
    if not found:
        raise BundleError(f"{root}: no bundle found (no {MANIFEST} at or under this folder)")
    return sorted(found)


def _refuse_pickles(path):
    for fn in sorted(os.listdir(path)):
        fp = os.path.join(path, fn)
        if not os.path.isfile(fp):
            continue
        if fn.lower().endswith(PICKLE_SUFFIXES):
            raise BundleError(f"{fp}: a {os.path.splitext(fn)[1]} file in a bundle is refused: it may hold a pickle "
                              "and trnsim never unpickles (bundles hold only safetensors or .npz plus JSON)")
        with open(fp, "rb") as f:
            head = f.read(4)
        if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
            raise BundleError(f"{fp}: is a Python pickle (protocol {head[1]}); refused: trnsim never unpickles")
        if head == b"PK\x03\x04" and not fn.endswith(".npz"):
            raise BundleError(f"{fp}: is a zip archive (torch.save writes pickles in such archives); refused")


def _read_limited(fp, limit, what):
    size = os.path.getsize(fp)
    if size > limit:
        raise BundleError(f"{fp}: {what} is {size:,} bytes, over the limit of {limit:,} bytes (oversize; raise "
                          "--max-bytes / max_bytes= if the bundle is trusted and this large)")
    with open(fp, "rb") as f:
        return f.read()


def _check_manifest(man, mp):
    def bad(msg):
        raise BundleError(f"{mp}: {msg}")
    if not isinstance(man, dict):
        bad("the manifest is not a JSON object")
    if man.get("format") != FORMAT:
        bad(f"format is {man.get('format')!r}, expected {FORMAT!r} (not a trnsim difftest bundle)")
    if man.get("version") != VERSION:
        bad(f"bundle version {man.get('version')!r}; this trnsim reads version {VERSION}")
    tf = man.get("tensor_file")
    if tf not in ("tensors.safetensors", "tensors.npz"):
        bad(f"tensor_file {tf!r}: expected 'tensors.safetensors' or 'tensors.npz'")
    for k in ("tensor_file_bytes",):
        if not isinstance(man.get(k), int) or man[k] < 0:
            bad(f"{k} missing or not a non-negative integer")
    if not isinstance(man.get("tensor_file_sha256"), str):
        bad("tensor_file_sha256 missing")
    ents = man.get("entries")
    if not isinstance(ents, list):
        bad("entries missing or not a list")
    seen = set()
    for i, e in enumerate(ents):
        if not isinstance(e, dict):
            bad(f"entries[{i}] is not an object")
        for k, typ in (("key", str), ("kind", str), ("seq", int), ("dtype", str), ("shape", list),
                       ("sha256", str), ("store", str)):
            if not isinstance(e.get(k), typ):
                bad(f"entries[{i}] ({e.get('key', '?')}): field {k!r} missing or not a {typ.__name__}")
        if any(not isinstance(s, int) or s < 0 for s in e["shape"]):
            bad(f"entries[{i}] ({e['key']}): shape {e['shape']} is not a list of non-negative integers")
        if e["key"] in seen:
            bad(f"entries[{i}]: key {e['key']!r} appears twice")
        seen.add(e["key"])


def _parse_safetensors(data: bytes, fp: str) -> dict:
    if len(data) < 8:
        raise BundleError(f"{fp}: truncated: {len(data)} bytes, shorter than the 8-byte safetensors header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER_BYTES:
        raise BundleError(f"{fp}: safetensors header claims {n:,} bytes, over the limit of {MAX_HEADER_BYTES:,}")
    if 8 + n > len(data):
        raise BundleError(f"{fp}: truncated: the header needs {8 + n:,} bytes, the file has {len(data):,}")
    try:
        head = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{fp}: the safetensors header is not valid JSON ({e})") from None
    if not isinstance(head, dict):
        raise BundleError(f"{fp}: the safetensors header is not a JSON object")
    body = memoryview(data)[8 + n:]
    out, spans = {}, []
    for name, info in head.items():
        if name == "__metadata__":
            continue
        try:
            dt = _ST_DTYPES[info["dtype"]]
            shape = [int(s) for s in info["shape"]]
            b, e = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise BundleError(f"{fp}: tensor {name!r}: bad header entry {info!r}") from None
        numel = 1
        for s in shape:
            numel *= s
        need = numel * torch.empty((), dtype=dt).element_size()
        if not (0 <= b <= e) or e - b != need:
            raise BundleError(f"{fp}: tensor {name!r}: data_offsets {b}..{e} do not hold {shape} {dt}")
        if e > len(body):
            raise BundleError(f"{fp}: truncated: tensor {name!r} ends at byte {e:,} of the data, which has "
                              f"{len(body):,}")
        spans.append((b, e))
        raw = bytes(body[b:e])
        t = torch.frombuffer(bytearray(raw), dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = t.reshape(shape)
    pos = 0
    for b, e in sorted(spans):
        if b != pos:
            raise BundleError(f"{fp}: the safetensors data has a hole or overlap at byte {pos:,}")
        pos = e
    if pos != len(body):
        raise BundleError(f"{fp}: {len(body) - pos:,} bytes after the last tensor")
    return out


def _parse_npz(data: bytes, fp: str, max_bytes: int, dtypes: dict) -> dict:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except zipfile.BadZipFile as e:
        raise BundleError(f"{fp}: not a readable .npz ({e}); corrupt or truncated") from None
    total = sum(i.file_size for i in infos)
    if total > max_bytes:
        raise BundleError(f"{fp}: the .npz expands to {total:,} bytes, over the limit of {max_bytes:,} (oversize)")
    for i in infos:
        if not i.filename.endswith(".npy"):
            raise BundleError(f"{fp}: member {i.filename!r} is not a .npy array; refused")
        with zf.open(i) as f:
            try:
                version = np.lib.format.read_magic(f)
                hdr = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                       else np.lib.format.read_array_header_2_0(f))
            except ValueError as e:
                raise BundleError(f"{fp}: member {i.filename!r}: bad .npy header ({e})") from None
        if hdr[2].hasobject:
            raise BundleError(f"{fp}: member {i.filename!r} is an object array (it holds pickles); refused: trnsim "
                              "never unpickles")
    out = {}
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            for k in z.files:
                arr = z[k]
                t = torch.from_numpy(arr.copy(order="C"))
                want = dtypes.get(k)
                if want is not None and want in _NPZ_RAW and t.dtype == _NPZ_RAW[want]:
                    t = t.view(want)
                out[k] = t
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise BundleError(f"{fp}: cannot read the .npz without pickles ({e})") from None
    return out


def load_bundle(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Bundle:
    """Read and validate one bundle folder; raises :class:`BundleError` naming what is wrong."""
    if os.path.isfile(path) and os.path.basename(path) == MANIFEST:
        path = os.path.dirname(os.path.abspath(path))
    mp = os.path.join(path, MANIFEST)
    if not os.path.isfile(mp):
        raise BundleError(f"{path}: not a bundle (no {MANIFEST})")
    _refuse_pickles(path)
    raw = _read_limited(mp, MAX_MANIFEST_BYTES, "the manifest")
    try:
        man = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{mp}: not valid JSON ({e}); corrupt or truncated") from None
    _check_manifest(man, mp)
    fp = os.path.join(path, man["tensor_file"])
    if not os.path.isfile(fp):
        raise BundleError(f"{fp}: missing (the manifest names it)")
    size = os.path.getsize(fp)
    if size > max_bytes:
        raise BundleError(f"{fp}: {size:,} bytes, over the limit of {max_bytes:,} bytes (oversize; raise "
                          "--max-bytes / max_bytes= if the bundle is trusted and this large)")
    if size != man["tensor_file_bytes"]:
        what = "truncated" if size < man["tensor_file_bytes"] else "longer than recorded"
        raise BundleError(f"{fp}: {what}: {size:,} bytes, the manifest says {man['tensor_file_bytes']:,}")
    data = _read_limited(fp, max_bytes, "the tensor file")
    got = sha256(data)
    if got != man["tensor_file_sha256"]:
        raise BundleError(f"{fp}: checksum mismatch (SHA-256 {got[:16]}..., the manifest says "
                          f"{man['tensor_file_sha256'][:16]}...): the file is corrupt or was changed")
    if man["tensor_file"].endswith(".npz"):
        tensors = _parse_npz(data, fp, max_bytes,
                             {e["store"]: torch_dtype(e.get("stored_dtype", e["dtype"])) for e in man["entries"]})
    else:
        tensors = _parse_safetensors(data, fp)
    for e in man["entries"]:
        t = tensors.get(e["store"])
        if t is None:
            raise BundleError(f"{fp}: tensor {e['store']!r} of entry {e['key']!r} is missing from the file")
        sd = e.get("stored_dtype", e["dtype"])
        if dtype_name(t.dtype) != sd or list(t.shape) != e.get("stored_shape", e["shape"]):
            raise BundleError(f"{fp}: entry {e['key']!r}: the file holds {dtype_name(t.dtype)} {list(t.shape)}, "
                              f"the manifest says {sd} {e.get('stored_shape', e['shape'])}")
        if sha256(tensor_bytes(t)) != e["sha256"]:
            raise BundleError(f"{fp}: entry {e['key']!r}: checksum mismatch; the tensor's bytes were changed")
    return Bundle(path, man, tensors)
