"""Bundles that cannot be trusted are refused with a clear message (and `trnsim compare` exits 2); nothing is
ever unpickled."""

import io
import json
import os
import pickle
import shutil
import zipfile

import numpy as np
import pytest
import torch

import trnsim.difftest as dt
from trnsim.cli import main as trnsim_main
from trnsim.difftest.bundle import sha256


@pytest.fixture
def bundle(tmp_path):
    with dt.record(tmp_path / "rec", name="t") as rec:
        rec.output("x", torch.arange(64, dtype=torch.float32).reshape(8, 8))
        rec.output("y", torch.ones(3, dtype=torch.bfloat16))
    return tmp_path / "rec" / "t" / "rank0"


def refused(path, match, capsys=None, **kw):
    with pytest.raises(dt.BundleError, match=match):
        dt.load_bundle(path, **kw)


def _cli_exit(a, b, capsys, *extra):
    code = trnsim_main(["compare", str(a), str(b), *extra])
    return code, capsys.readouterr().err


def test_good_bundle_loads(bundle):
    b = dt.load_bundle(bundle)
    assert torch.equal(b.tensor("output/x"), torch.arange(64, dtype=torch.float32).reshape(8, 8))
    assert b.tensor("output/y").dtype == torch.bfloat16


def test_corrupt_tensor_file_is_refused(bundle, tmp_path, capsys):
    good = tmp_path / "good"
    shutil.copytree(bundle, good)
    f = bundle / "tensors.safetensors"
    data = bytearray(f.read_bytes())
    data[-5] ^= 0xFF                           # flip bits inside the last tensor's data
    f.write_bytes(bytes(data))
    refused(bundle, "checksum mismatch")
    code, err = _cli_exit(good, bundle, capsys)
    assert code == 2 and "checksum mismatch" in err and "corrupt" in err


def test_changed_tensor_with_a_rewritten_file_checksum_is_named(bundle):
    f = bundle / "tensors.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x01
    f.write_bytes(bytes(data))
    man = json.loads((bundle / "manifest.json").read_text())
    man["tensor_file_sha256"] = sha256(bytes(data))       # someone fixed the file checksum but not the tensor's
    (bundle / "manifest.json").write_text(json.dumps(man))
    refused(bundle, r"entry 'output/y': checksum mismatch")


def test_truncated_bundle_is_refused(bundle, tmp_path, capsys):
    f = bundle / "tensors.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    refused(bundle, "truncated")
    (bundle / "manifest.json").write_text((bundle / "manifest.json").read_text()[:50])
    refused(bundle, "not valid JSON")


def test_truncated_safetensors_header_is_refused(bundle):
    # a file whose checksums match but whose header claims more than the file holds
    f = bundle / "tensors.safetensors"
    data = (2 ** 40).to_bytes(8, "little") + b"{}"
    f.write_bytes(data)
    man = json.loads((bundle / "manifest.json").read_text())
    man.update(tensor_file_sha256=sha256(data), tensor_file_bytes=len(data))
    (bundle / "manifest.json").write_text(json.dumps(man))
    refused(bundle, "header claims")


def test_oversize_bundle_is_refused(bundle, tmp_path, capsys):
    refused(bundle, r"oversize", max_bytes=100)
    code, err = _cli_exit(bundle, bundle, capsys, "--max-bytes", "100")
    assert code == 2 and "over the limit of 100 bytes" in err


class _Boom:
    """Unpickling this would create a file: proof that nothing was unpickled."""
    marker = None

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_bearing_bundles_are_refused(bundle, tmp_path, capsys):
    marker = tmp_path / "UNPICKLED"
    _Boom.marker = str(marker)
    evil = pickle.dumps(_Boom())
    # 1. a torch.save / pickle file dropped into the bundle
    (bundle / "extra.pt").write_bytes(evil)
    refused(bundle, r"\.pt file in a bundle is refused")
    os.unlink(bundle / "extra.pt")
    # 2. the tensor file replaced by a pickle (under the expected name, with matching checksums)
    f = bundle / "tensors.safetensors"
    f.write_bytes(evil)
    man = json.loads((bundle / "manifest.json").read_text())
    man.update(tensor_file_sha256=sha256(evil), tensor_file_bytes=len(evil))
    (bundle / "manifest.json").write_text(json.dumps(man))
    refused(bundle, "is a Python pickle")
    code, err = _cli_exit(bundle, bundle, capsys)
    assert code == 2 and "never unpickles" in err
    # 3. an .npz whose array is an object array (pickles inside)
    buf = io.BytesIO()
    np.savez(buf, t0=np.array([_Boom()], dtype=object))
    data = buf.getvalue()
    os.unlink(f)
    (bundle / "tensors.npz").write_bytes(data)
    man.update(tensor_file="tensors.npz", tensor_file_sha256=sha256(data), tensor_file_bytes=len(data))
    (bundle / "manifest.json").write_text(json.dumps(man))
    refused(bundle, "object array")
    # 4. a torch.save zip archive
    buf = io.BytesIO()
    torch.save({"x": torch.ones(2)}, buf)
    (bundle / "tensors.npz").unlink()
    (bundle / "weights").write_bytes(buf.getvalue())
    refused(bundle, "zip archive")
    assert not marker.exists()


def test_npz_with_a_non_array_member_is_refused(tmp_path):
    with dt.record(tmp_path, name="n", fmt="npz") as rec:
        rec.output("x", torch.ones(2))
    b = tmp_path / "n" / "rank0"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("t0.npy", (b / "tensors.npz").read_bytes()[:0] or _npy(np.ones(2, np.float32)))
        z.writestr("payload.pkl", b"\x80\x04K\x01.")
    data = buf.getvalue()
    (b / "tensors.npz").write_bytes(data)
    man = json.loads((b / "manifest.json").read_text())
    man.update(tensor_file_sha256=sha256(data), tensor_file_bytes=len(data))
    (b / "manifest.json").write_text(json.dumps(man))
    refused(b, "is not a .npy array")


def _npy(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def test_malformed_manifests_are_refused(bundle, tmp_path, capsys):
    man = json.loads((bundle / "manifest.json").read_text())
    for change, match in ((dict(format="other"), "not a trnsim difftest bundle"),
                          (dict(version=99), "bundle version 99"),
                          (dict(tensor_file="../../etc/passwd"), "tensor_file"),
                          (dict(entries=[{"key": "x"}]), r"field 'kind' missing")):
        bad = dict(man, **change)
        (bundle / "manifest.json").write_text(json.dumps(bad))
        refused(bundle, match)
    code, err = _cli_exit(tmp_path / "nothing-here", bundle, capsys)
    assert code == 2 and "no such file" in err
    (tmp_path / "empty").mkdir()
    code, err = _cli_exit(tmp_path / "empty", bundle, capsys)
    assert code == 2 and "no bundle found" in err
