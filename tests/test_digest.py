"""`kit digest DIR` equals an independent computation written from docs/formats/parameter-digest.md alone.

The oracle below deliberately imports nothing from kit: struct + json + hashlib, exactly as the
document describes the parameter digest.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import struct
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

# docs/formats/parameter-digest.md, "Parameter digest", step 2
DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
          "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
          "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def independent_digest(directory) -> str:
    rows = []
    for path in glob.glob(os.path.join(directory, "*.safetensors")):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            base = 8 + n
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                begin, end = meta["data_offsets"]
                f.seek(base + begin)
                data = f.read(end - begin)
                assert len(data) == end - begin
                rows.append([name, DTYPES[meta["dtype"]], meta["shape"], hashlib.sha256(data).hexdigest()])
    rows.sort(key=lambda r: r[0])
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode("utf-8")).hexdigest()


def kit(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KIT_PROGRESS": "0"}
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def kit_digest(directory) -> str:
    result = kit("digest", str(directory))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("digest") / "seed"
    result = kit("seed", "build", "--test-size", "--no-progress", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out, json.loads(result.stdout)


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(5, 4, generator=g),
        "model.layers.0.mlp.up_proj.weight": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.ones(4),
        "step": torch.tensor([7], dtype=torch.int64),
    }


def test_seed_directory_digest_matches_the_documented_computation(seed_dir):
    out, summary = seed_dir
    expected = independent_digest(out)
    assert kit_digest(out) == expected
    assert summary["parameter_digest"] == expected  # what `kit seed build` printed
    assert json.loads((out / "seed_build.json").read_text())["parameter_digest"] == expected


def test_sharded_directory_with_bfloat16(tmp_path):
    tensors = _tensors()
    names = sorted(tensors)
    sharded, single = tmp_path / "sharded", tmp_path / "single"
    sharded.mkdir()
    single.mkdir()
    save_file({n: tensors[n] for n in names[:2]}, str(sharded / "model-00001-of-00002.safetensors"),
              metadata={"format": "pt"})
    save_file({n: tensors[n] for n in names[2:]}, str(sharded / "model-00002-of-00002.safetensors"))
    save_file(tensors, str(single / "model.safetensors"))
    with open(sharded / "model-00001-of-00002.safetensors", "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    assert header["model.layers.0.mlp.up_proj.weight"]["dtype"] == "BF16"  # the case under test is present
    expected = independent_digest(sharded)
    assert kit_digest(sharded) == expected
    assert kit_digest(single) == expected  # the digest does not depend on how tensors are split into files
    # and it does depend on the bytes: one bf16 value changed -> another digest
    tensors["model.layers.0.mlp.up_proj.weight"][0, 0] += 1
    save_file(tensors, str(single / "model.safetensors"))
    assert kit_digest(single) != expected


def test_duplicate_tensor_name_across_files_is_refused(tmp_path):
    tensors = _tensors()
    save_file(tensors, str(tmp_path / "a.safetensors"))
    save_file({"model.norm.weight": torch.zeros(4)}, str(tmp_path / "b.safetensors"))
    result = kit("digest", str(tmp_path))
    assert result.returncode == 2
    assert "b.safetensors: tensor 'model.norm.weight' also stored in" in result.stderr
    assert "a.safetensors" in result.stderr


def test_truncated_file_is_refused_naming_the_file(tmp_path):
    save_file(_tensors(), str(tmp_path / "model.safetensors"))
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:-6])  # last tensor's bytes cut short
    result = kit("digest", str(tmp_path))
    assert result.returncode == 2
    assert f"{tmp_path / 'model.safetensors'}: tensor" in result.stderr and "outside the file" in result.stderr
    (tmp_path / "model.safetensors").write_bytes(data[:5])  # not even the header length
    result = kit("digest", str(tmp_path))
    assert result.returncode == 2
    assert f"{tmp_path / 'model.safetensors'}: truncated safetensors file" in result.stderr


def test_directory_without_safetensors_is_refused(tmp_path):
    result = kit("digest", str(tmp_path))
    assert result.returncode == 2
    assert f"{tmp_path}: no *.safetensors files" in result.stderr


def test_partial_sharded_model_is_refused(tmp_path):
    """Issue 52, item 6: `kit digest` printed a digest for a model with a missing shard, the digest the
    own-model guide tells you to pin. Now the index and the shards must agree, one line naming the file."""
    tensors = _tensors()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(tmp_path / file))
    index = tmp_path / "model.safetensors.index.json"
    weight_map = {n: f for f, part in shards.items() for n in part}
    index.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    whole = kit_digest(tmp_path)
    assert whole == independent_digest(tmp_path)

    def refused(*words):
        result = kit("digest", str(tmp_path))
        assert result.returncode == 2 and result.stdout == "", result.stdout
        assert len(result.stderr.strip().splitlines()) == 1 and all(w in result.stderr for w in words), result.stderr

    second = (tmp_path / "model-00002-of-00002.safetensors").read_bytes()
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    refused(str(index), "'weight_map' names shard(s) not in", "model-00002-of-00002.safetensors")
    index.unlink()  # no index either: the shard names still say two files
    refused("shard(s) model-00002-of-00002.safetensors missing")
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(second)
    index.write_text(json.dumps({"weight_map": {n: f for n, f in weight_map.items() if n != "step"}}))
    refused("model-00002-of-00002.safetensors: tensor 'step' is not in model.safetensors.index.json")
    index.write_text(json.dumps({"weight_map": {**weight_map, "step": "model-00001-of-00002.safetensors"}}))
    refused("puts tensor 'step' in model-00001-of-00002.safetensors; found in model-00002-of-00002.safetensors")
    index.write_text(json.dumps({"weight_map": weight_map}))
    assert kit_digest(tmp_path) == whole
