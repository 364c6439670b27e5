"""The model file holds the plain math only; the engine applies the weight cache and the fused
elementwise to a built model (kit/engine/fast_paths.py). Applied and engaged, the blocks compute what the
model file's own fast-path arguments computed before the move, bit for bit on CPU (a digest taken with
the pre-move code, commit a631233); applied but not engaged, they are the plain model."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest
import torch

from kit.distributed.pipeline import EngineConfig
from kit.engine.fast_paths import FastPaths, apply_fast_paths
from kit.model.config import toy_shape
from kit.model.llama import LlamaCausalLM, init_weights

pytestmark = pytest.mark.usefixtures("one_thread")

BF = torch.bfloat16
CPU = torch.device("cpu")
LLAMA = Path(__file__).resolve().parents[1] / "kit" / "model" / "llama.py"
# out, reference out and every student gradient of the fused + cached blocks, from the pre-move code
# (`run_blocks(h, cos, sin, WeightCache.blocks, True)` and `reference.run_blocks(..., fused=True)`).
PRE_MOVE_FAST_DIGEST = "6948cbd796cd9c2ba2fb3ea1d9da5dbbef005b3a888fe152006446c6c46582bf"


def test_the_model_file_has_no_fast_path_switches():
    tree = ast.parse(LLAMA.read_text())
    imports = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imports & {"kit.model.fused", "kit.model.weight_cache", "kit.model"}, imports
    args = {a.arg for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for a in f.args.args}
    assert not args & {"low", "fused", "weights"}, args
    assert "compile_blocks" not in {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}


def _pair(layers: int = 2):
    model = LlamaCausalLM(toy_shape(num_hidden_layers=layers))
    init_weights(model, 0)
    ref = LlamaCausalLM(toy_shape(num_hidden_layers=layers))
    init_weights(ref, 1)
    ref.to(BF).requires_grad_(False)
    return model, ref


def _forward_backward(model, ref, engaged, seq: int, seed: int):
    """Student and reference blocks under autocast, then a backward through the student's."""
    ids = torch.randint(0, model.shape.vocab_size, (2, seq), generator=torch.Generator().manual_seed(seed))
    with torch.autocast("cpu", dtype=BF), engaged():
        h = model.embed(ids)
        cos, sin = model.rope_tables(seq, h.device, BF)
        out = model.run_blocks(h.to(BF), cos, sin)
        with torch.no_grad():
            th = ref.run_blocks(ref.embed(ids).to(BF), cos, sin)
    (out.float().pow(2).sum() + (out.float() * th.float()).sum()).backward()
    return out, th


def _digest(model, ref, engaged) -> str:
    out, th = _forward_backward(model, ref, engaged, 11, 5)
    d = hashlib.sha256()
    for t in [out, th] + [p.grad for _, p in model.named_parameters() if p.grad is not None]:
        d.update(t.detach().float().contiguous().numpy().tobytes())
    return d.hexdigest()


def test_applied_fast_paths_are_the_pre_move_fast_path_bit_for_bit_and_only_when_engaged():
    plain_model, plain_ref = _pair()
    plain = _digest(plain_model, plain_ref, FastPaths().engaged)

    model, ref = _pair()
    before = dict(model.named_parameters())
    cfg = EngineConfig(2, 1.0, compute_dtype="bfloat16", weight_cache="on", fused_elementwise="on")
    paths = apply_fast_paths(model, ref, cfg, CPU)
    assert dict(model.named_parameters()) == before  # the same names and the same Parameter objects
    assert set(model.state_dict()) == set(plain_model.state_dict())
    assert paths.fused and paths.weight_cache is not None and not paths.active
    paths.weight_cache.refresh()
    assert _digest(model, ref, FastPaths().engaged) == plain  # not engaged: the model file's path
    model.zero_grad()
    assert _digest(model, ref, paths.engaged) == PRE_MOVE_FAST_DIGEST != plain
    assert not paths.active


def test_the_cpu_default_applies_nothing():
    model, ref = _pair()
    kinds = [type(m) for m in model.modules()]
    paths = apply_fast_paths(model, ref, EngineConfig(2, 1.0, compute_dtype="bfloat16"), CPU)
    assert (paths.weight_cache, paths.fused) == (None, False)
    assert [type(m) for m in model.modules()] == kinds


def test_compiled_engaged_blocks_share_one_graph_per_model():
    """On CUDA the engine compiles each block; with the fast paths applied as module attributes (the weight
    copies are plain tensor attributes now, no longer arguments) every block must still reuse one graph:
    a recompilation per block would exhaust dynamo's cache limit and drop the later blocks to eager. Dynamo's
    tracing does not depend on the device, so a recording backend on CPU sees the graphs CUDA gets; before the
    move the same model traced to the same 2 graphs of 61 and 54 operations."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from kit.engine.fast_paths import compile_blocks

    graphs = []

    def record(gm, example_inputs):
        graphs.append(sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes))
        return gm.forward

    torch._dynamo.reset()
    counters.clear()
    model, ref = _pair(layers=4)
    cfg = EngineConfig(2, 1.0, compute_dtype="bfloat16", weight_cache="on", fused_elementwise="on")
    paths = apply_fast_paths(model, ref, cfg, CPU)
    paths.weight_cache.refresh()
    compile_blocks(model, backend=record)
    compile_blocks(ref, backend=record)
    try:
        for step in range(2):
            _forward_backward(model, ref, paths.engaged, 16, step)
        assert graphs == [61, 54]  # the student's block (cached weights, fused) and the reference's block
        assert not counters["recompiles"]
    finally:
        torch._dynamo.reset()
