"""Issue 54's update levers on CPU: the fused AdamW's step counts kept on the device
(ParamAdamW.keep_steps_on_device, EngineConfig.adam_steps_on_device) against the per-bucket steps, bit for
bit; the host reads of one engine update, counted; the engine switches (off by default) reaching the loss,
the optimizer and the blocks; and the benchmark's lever sections on a toy shape.

The fused kernel (torch._fused_adamw_) has a CPU implementation, so the CUDA path's step logic runs here
with `fused` forced on; the CPU evidence never takes that path (ParamAdamW picks foreach on CPU).
"""

from __future__ import annotations

import importlib.util
import json
import traceback
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from support.engine import OPT, make_batches
from support.engine_workers import build_engine, engine_config, records_from_json
from torch.utils._python_dispatch import TorchDispatchMode

from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig, PendingUpdateResult
from kit.model.shard import even_layout
from kit.train.optim import GroupConfig, ParamAdamW

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")
GROUPS = {"default": GroupConfig(**OPT), "no_decay": GroupConfig(lr=2e-2, beta2=0.99)}


def _optimizer(student_reference, device_steps: bool, fused: bool = True) -> ParamAdamW:
    """The optimizer of a tiny engine (norms in their own group, so the (group, age) buckets are several)."""
    cfg = engine_config({"microbatch_size": 2, "max_grad_norm": 1.0})
    opt = build_engine(Group(0, 1, CPU), str(student_reference[0]), None, even_layout(3, 1), cfg, GROUPS,
                       group_rules=[("*norm*", "no_decay")]).optimizer
    opt.fused = fused  # the CUDA path's kernel, on CPU
    if device_steps:
        opt.keep_steps_on_device()
    return opt


def _run(opt: ParamAdamW, steps: int = 5) -> list[str]:
    """`steps` steps with a device clip factor; the first parameter has no gradient on steps 1 and 3 (its
    age lags, so the buckets split), and a checkpoint load at step 2 sets another's age. Returns the ops."""
    gen = torch.Generator().manual_seed(11)
    names = sorted(opt.params)
    ops = []
    for k in range(steps):
        for n, p in opt.params.items():
            p.grad = None if (n == names[0] and k in (1, 3)) else torch.randn(p.shape, generator=gen) * 1e-2
        if k == 2:
            states = opt.param_states()
            states[names[1]] = {**states[names[1]], "age": 9}
            opt.load_param_states({n: {key: (v.clone() if torch.is_tensor(v) else v) for key, v in s.items()}
                                   for n, s in states.items()})
        with _OpLog() as log:
            opt.step(grad_factor=torch.tensor(0.75, dtype=torch.float64), found_inf=torch.zeros(()))
        ops += log.ops
    return ops


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_device_steps_give_the_fused_step_bit_for_bit_with_fewer_ops(student_reference):
    """The same kernel reads the same step values (the ages, exact in FP32), so parameters and moments
    are bit-identical; the per-bucket `full` buffers are gone, one multi-tensor add per step instead."""
    base, kept = _optimizer(student_reference, False), _optimizer(student_reference, True)
    base_ops, kept_ops = _run(base), _run(kept)
    for n in base.params:
        assert torch.equal(base.params[n], kept.params[n]), n
        assert torch.equal(base.state[n].exp_avg, kept.state[n].exp_avg), (n, "exp_avg")
        assert torch.equal(base.state[n].exp_avg_sq, kept.state[n].exp_avg_sq), (n, "exp_avg_sq")
        assert base.state[n].age == kept.state[n].age == int(kept.device_steps[n])
    assert base_ops.count("full") >= 10 and "full" not in kept_ops  # 2 groups, ages split on some steps
    assert kept_ops.count("_foreach_add_") == 5 and "_foreach_add_" not in base_ops
    assert base_ops.count("_fused_adamw_") == kept_ops.count("_fused_adamw_")


def test_device_steps_change_nothing_on_the_foreach_path(student_reference):
    """CPU's default path has no step tensors: the switch leaves it as it was, bit for bit."""
    base, kept = _optimizer(student_reference, False, fused=False), _optimizer(student_reference, True, fused=False)
    assert kept.device_steps is None
    _run(base), _run(kept)
    assert all(torch.equal(base.params[n], kept.params[n]) for n in base.params)


# --- host reads of one update ------------------------------------------------------------------------
READS = ("item", "__float__", "__bool__", "tolist", "__int__", "__index__", "cpu", "numpy")


def _count_reads(fn) -> list[tuple[str, str]]:
    """Run `fn` with every tensor-to-host read patched to record (read, the kit function that made it)."""
    calls, saved = [], {name: getattr(torch.Tensor, name) for name in READS}

    def counting(name, f):
        def read(self, *a, **k):
            frames = [fr for fr in traceback.extract_stack()[:-1] if "/kit/" in fr.filename]
            calls.append((name, frames[-1].name if frames else "?"))
            return f(self, *a, **k)
        return read

    for name, f in saved.items():
        setattr(torch.Tensor, name, counting(name, f))
    try:
        fn()
    finally:
        for name, f in saved.items():
            setattr(torch.Tensor, name, f)
    return calls


def _engine(student_reference, **switches):
    cfg = replace(engine_config({"microbatch_size": 2, "max_grad_norm": 0.05}), **switches)
    return build_engine(Group(0, 1, CPU), str(student_reference[0]), str(student_reference[1]), even_layout(3, 1),
                        cfg, {"default": GroupConfig(**OPT)})


@pytest.mark.parametrize("path,expected", [
    # the CUDA path (clip factor on the device, the fused AdamW): no host read at all until the caller
    # resolves the result
    ("device-clip-fused", []),
    # the foreach AdamW (CPU) must know on the host whether the norm was finite, to skip the step
    ("device-clip-foreach", [("__bool__", "step")]),
    # the host clip (the CPU default): the one designed read, the norms and loss sums in one copy
    ("host-clip", [("cpu", "_clip"), ("tolist", "_clip")]),
])
def test_one_update_reads_the_host_only_where_the_design_says(student_reference, path, expected):
    eng = _engine(student_reference, clip_on_device="off" if path == "host-clip" else "on")
    eng.optimizer.fused = path == "device-clip-fused"
    records = records_from_json(make_batches(2)[0])
    eng.update(records)  # warm: first-call caches (index tensors) are not the steady state
    out = {}
    reads = _count_reads(lambda: out.setdefault("result", eng.update(records)))
    assert reads == expected
    if path != "host-clip":
        assert isinstance(out["result"], PendingUpdateResult)
        assert [r for r in _count_reads(out["result"].resolve)] == [("tolist", "values")]  # read once, on request


def test_engine_switches_as_the_gpu_record_decided_reach_loss_and_optimizer(student_reference):
    cfg = EngineConfig(2, 1.0)
    # runs/bench-update-levers-2026-12-05: the compiled loss +5.7% on CUDA ("auto": the CPU keeps the eager loop
    # and its digests); device step counts and graph capture within noise (off)
    assert (cfg.compiled_loss, cfg.adam_steps_on_device, cfg.graph_capture) == ("auto", "off", "off")
    with pytest.raises(ValueError, match="engine graph_capture 'yes'; expected 'auto', 'on' or 'off'"):
        EngineConfig(2, 1.0, graph_capture="yes")
    off = _engine(student_reference)
    assert not off.compiled_loss and off.optimizer.device_steps is None and not off.graph_capture
    on = _engine(student_reference, compiled_loss="on", adam_steps_on_device="on", graph_capture="on")
    assert on.compiled_loss and not on.graph_capture  # graph capture only with compiled blocks (CUDA)
    records = records_from_json(make_batches(1)[0])
    a, b = off.update(records), on.update(records)
    # the compiled loss's sums differ from the eager loop's by FP32 reordering only (tests/test_compiled_loss.py)
    assert abs(a.parts.objective - b.parts.objective) <= 1e-5 * abs(a.parts.objective)


def test_bench_runs_the_lever_sections_on_a_toy_shape(tmp_path):
    spec = importlib.util.spec_from_file_location("update_throughput",
                                                  Path(__file__).resolve().parents[1] / "bench" / "update_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sections = "kit," + ",".join(bench.LEVERS.values()) + ",kit_levers"
    assert bench.main(["--tiny", "--sections", sections, "--warmup", "1", "--steps", "1", "--seq", "16",
                       "--levers", "on", "--out", str(tmp_path)]) == 0
    rows = {r["row"]: r for r in json.loads((tmp_path / "run.json").read_text())["results"]}
    assert rows["kit_equal_work"]["compiled_loss"] and rows["kit_equal_work_levers"]["compiled_loss"]
    assert not rows["kit_equal_work_compiled_loss_off"]["compiled_loss"]
    # the foreach optimizer (CPU) has no step tensors; graph capture needs compiled blocks (CUDA)
    assert not any(r["adam_steps_on_device"] or r["graph_capture"] for n, r in rows.items() if n.startswith("kit_"))
    assert {"kit_equal_work_adam_steps_on_device_off", "kit_equal_work_graph_capture_off"} <= set(rows)
