"""Capacity planner: exact against brute force, heterogeneous capacities, refusals, hand-computed bytes."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from kit.model.config import LlamaShape, smollm2_17b
from kit.planner import (
    GIB,
    AdmissionError,
    MemoryModel,
    MicrobatchShape,
    PlanError,
    WorkerCapacity,
    admit,
    embedding_param_count,
    estimate_worker,
    plan,
    shape_with_growth,
)


def tiny_shape(layers: int = 2, tied: bool = True) -> LlamaShape:
    return LlamaShape(
        vocab_size=10,
        hidden_size=4,
        intermediate_size=8,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=2,
        rms_norm_eps=1e-6,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
    )


MB = MicrobatchShape(batch=2, seq_len=3, in_flight=2)


def test_estimate_breakdown_equals_hand_computed_bytes():
    shape = tiny_shape(layers=3)
    # block: q 4*2*2=16, k+v 2*4*1*2=16, o 2*2*4=16, mlp 3*4*8=96, two norms 2*4=8 -> 152
    assert shape.block_param_count() == 152
    # tied: embeddings 10*4=40, no separate head, final norm 4 -> 44
    assert embedding_param_count(shape) == 44
    model = MemoryModel(compute_copy_bytes=2, reference_bytes=2)
    est = estimate_worker(shape, range(1, 3), True, MB, model)
    params = 2 * 152 + 44
    assert est.param_count == params == 348
    assert est.components["master_weights"] == 1392
    assert est.components["gradients"] == 1392
    assert est.components["adam_moments"] == 2784
    assert est.components["compute_copy"] == 696
    assert est.components["reference"] == 696
    # per token per block: (4*4 + 2*2*2 + 2*1*2 + 4*8) elements = 60 -> 240 bytes; 6 tokens x 2 in flight
    # x 2 blocks = 5760; final norm on the owner: 2*4 elements = 32 bytes x 12 token-slots = 384
    assert est.components["activations"] == 5760 + 384
    # logits: min(1024, 6) tokens x vocab 10 x 4 bytes x factor 4
    assert est.components["logits_buffers"] == 960
    assert est.components["reserve"] == 0
    assert est.total == sum(est.components.values()) == 1392 * 2 + 2784 + 696 * 2 + 6144 + 960


def test_estimate_untied_non_owner_and_reserve():
    shape = tiny_shape(layers=3, tied=False)
    assert embedding_param_count(shape) == 84  # embeddings 40 + untied head 40 + final norm 4
    model = MemoryModel(reserve_bytes=1000, reserve_fraction=0.5)
    est = estimate_worker(shape, range(1), False, MB, model)
    assert est.param_count == 152
    assert est.components["master_weights"] == 608
    assert est.components["adam_moments"] == 1216
    assert est.components["compute_copy"] == 0
    assert est.components["reference"] == 608
    assert est.components["activations"] == 240 * 12
    assert est.components["logits_buffers"] == 0
    subtotal = 608 * 2 + 1216 + 608 + 2880
    assert est.components["reserve"] == 1000 + subtotal // 2
    assert est.total == subtotal + 1000 + subtotal // 2
    owner = estimate_worker(shape, range(1), True, MB, model)
    assert owner.param_count == 152 + 84


def test_estimate_refuses_blocks_outside_the_model():
    with pytest.raises(
        ValueError, match=r"blocks = range\(2, 5\); expected range\(start, stop\) within \[0, 3\]"
    ):
        estimate_worker(tiny_shape(3), range(2, 5), False, MB, MemoryModel())


def _brute_force(shape, workers, mb, model, owner):
    """The plan's full key over every contiguous composition: (peak, bottleneck time, sum u^2, cuts)."""
    n_layers, n_workers = shape.num_hidden_layers, len(workers)
    best = None
    for cuts in itertools.combinations(range(1, n_layers), n_workers - 1):
        bounds = (0, *cuts, n_layers)
        ranges = [(bounds[w], bounds[w + 1]) for w in range(n_workers)]
        utils = [
            Fraction(estimate_worker(shape, range(*r), w == owner, mb, model).total, workers[w].memory_bytes)
            for w, r in enumerate(ranges)
        ]
        times = [Fraction(r[1] - r[0]) / Fraction(workers[w].speed) for w, r in enumerate(ranges)]
        key = (max(utils), max(times), sum(u * u for u in utils), cuts)
        if best is None or key < best[0]:
            best = (key, ranges)
    return best


def test_plan_equals_brute_force_on_random_small_cases():
    rng = random.Random(20240607)
    model = MemoryModel(compute_copy_bytes=2, reference_bytes=2, reserve_bytes=512)
    checked = unsatisfiable = 0
    for _ in range(300):
        layers = rng.randint(1, 8)
        n_workers = rng.randint(1, min(4, layers))
        shape = tiny_shape(layers, tied=rng.random() < 0.5)
        mb = MicrobatchShape(rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 3))
        # equal capacities and speeds often, so that the tie-break decides
        base = rng.choice([6000, 9000, 14000, 30000])
        workers = [
            WorkerCapacity(
                f"w{w}",
                base if rng.random() < 0.5 else rng.randint(base // 2, base * 2),
                rng.choice([1.0, 1.0, 0.5, 2.0, 1.5]),
            )
            for w in range(n_workers)
        ]
        owner = rng.randrange(n_workers)
        if rng.random() < 0.4:
            # a tight embedding owner fixes the peak; the others have slack and equal memory, so the
            # secondary keys (time, sum of squares, smallest cuts) decide among many optimal splits
            tight = estimate_worker(shape, range(rng.randint(1, min(2, layers))), True, mb, model).total
            speed = rng.choice([1.0, 2.0])
            workers = [
                WorkerCapacity(f"w{w}", tight if w == owner else 10**6, 1.0 if w == owner else speed)
                for w in range(n_workers)
            ]
        (peak, _, _, _), ranges = _brute_force(shape, workers, mb, model, owner)
        if peak > 1:
            unsatisfiable += 1
            with pytest.raises(PlanError, match=f"best achievable peak utilisation is {float(peak):.4f}"):
                plan(shape, workers, mb, model, embedding_owner=owner)
            continue
        result = plan(shape, workers, mb, model, embedding_owner=owner)
        assert result.ranges == ranges
        assert result.peak_utilization == float(peak)
        assert [e.blocks for e in result.estimates] == ranges
        checked += 1
    assert checked > 150 and unsatisfiable > 10  # both branches exercised


def test_worker_with_twice_the_memory_gets_more_blocks():
    shape = tiny_shape(layers=8)
    model = MemoryModel()
    one_block = estimate_worker(shape, range(1), False, MB, model).total
    workers = [WorkerCapacity("small", 4 * one_block), WorkerCapacity("large", 8 * one_block)]
    result = plan(shape, workers, MB, model, embedding_owner=1)
    small, large = (r[1] - r[0] for r in result.ranges)
    assert large > small
    # without the embeddings, a 2x worker takes about twice the blocks
    result = plan(
        shape,
        [
            WorkerCapacity("small", 40 * one_block),
            WorkerCapacity("large", 80 * one_block),
            WorkerCapacity("emb", 80 * one_block),
        ],
        MB,
        model,
        embedding_owner=2,
    )
    counts = [r[1] - r[0] for r in result.ranges]
    assert counts[1] >= 2 * counts[0] - 1 and counts[1] > counts[0]


def test_equal_memory_speed_breaks_ties_toward_the_faster_worker():
    shape = tiny_shape(layers=7)
    model = MemoryModel()
    # the embedding owner is tight (one block only), so every split of the other six blocks has the same
    # peak; the secondary objective max(blocks / speed) then gives the 2x faster worker 4 blocks, not 3
    owner_cap = estimate_worker(shape, range(1), True, MB, model).total
    big = 10**9
    workers = [
        WorkerCapacity("emb", owner_cap),
        WorkerCapacity("slow", big, 1.0),
        WorkerCapacity("fast", big, 2.0),
    ]
    result = plan(shape, workers, MB, model)
    assert result.peak_utilization == 1.0
    assert result.ranges == [(0, 1), (1, 3), (3, 7)]
    # with equal speeds the same case splits evenly (sum of squared utilisations)
    workers[2] = WorkerCapacity("fast", big, 1.0)
    assert plan(shape, workers, MB, model).ranges == [(0, 1), (1, 4), (4, 7)]


def test_unsatisfiable_plan_names_peak_worker_and_shortfall():
    shape = tiny_shape(layers=2)
    model = MemoryModel()
    owner_est = estimate_worker(shape, range(1), True, MB, model).total
    other_est = estimate_worker(shape, range(1, 2), False, MB, model).total
    cap = owner_est - 100  # the owner cannot fit even its single block
    workers = [WorkerCapacity("gpu0", cap), WorkerCapacity("gpu1", other_est)]
    expected_peak = owner_est / cap
    with pytest.raises(PlanError) as err:
        plan(shape, workers, MB, model)
    message = str(err.value)
    assert f"best achievable peak utilisation is {expected_peak:.4f}" in message
    assert "worker 'gpu0', short by 0.000 GiB" in message
    assert "'gpu0' blocks [0, 1)" in message and "(100 bytes)" in message
    assert "'gpu1'" not in message.split("over capacity in that assignment:")[1]


def test_unsatisfiable_large_model_shortfall_in_gib():
    shape = smollm2_17b()
    workers = [WorkerCapacity("a", 10 * GIB), WorkerCapacity("b", 10 * GIB)]
    with pytest.raises(PlanError, match=r"unsatisfiable.*short by \d+\.\d{3} GiB"):
        plan(shape, workers, MicrobatchShape(1, 128, 1), MemoryModel())


def test_more_workers_than_blocks_refused():
    workers = [WorkerCapacity(f"w{i}", GIB) for i in range(3)]
    with pytest.raises(
        PlanError, match="3 workers but the model has 2 blocks; every worker needs at least one block"
    ):
        plan(tiny_shape(2), workers, MB, MemoryModel())


def test_plan_input_refusals():
    with pytest.raises(PlanError, match="no workers given"):
        plan(tiny_shape(2), [], MB, MemoryModel())
    with pytest.raises(PlanError, match="worker names .* are not unique"):
        plan(tiny_shape(2), [WorkerCapacity("a", GIB), WorkerCapacity("a", GIB)], MB, MemoryModel())
    with pytest.raises(PlanError, match=r"embedding_owner = 2; expected a worker index in \[0, 2\)"):
        plan(tiny_shape(2), [WorkerCapacity("a", GIB), WorkerCapacity("b", GIB)], MB, MemoryModel(), 2)
    with pytest.raises(ValueError, match="WorkerCapacity 'a': field 'memory_bytes' = 0"):
        WorkerCapacity("a", 0)
    with pytest.raises(
        ValueError, match="WorkerCapacity 'a': field 'speed' = 0.0; expected a finite number > 0"
    ):
        WorkerCapacity("a", GIB, 0.0)
    with pytest.raises(ValueError, match="MicrobatchShape: field 'in_flight' = 0"):
        MicrobatchShape(1, 8, 0)
    with pytest.raises(ValueError, match="MemoryModel: field 'reserve_fraction' = -0.1"):
        MemoryModel(reserve_fraction=-0.1)


def test_plan_report_is_json_ready():
    import json

    result = plan(tiny_shape(4), [WorkerCapacity("a", 10**6), WorkerCapacity("b", 10**6)], MB, MemoryModel())
    report = json.loads(json.dumps(result.to_json()))
    assert [w["blocks"] for w in report["workers"]] == [list(r) for r in result.ranges]
    assert report["peak_utilization"] == max(w["utilization"] for w in report["workers"])
    assert report["workers"][0]["estimate"]["owns_embedding"] is True
    assert sum(w["blocks"][1] - w["blocks"][0] for w in report["workers"]) == 4


def test_admission_refusal_names_worker_estimate_and_free():
    est = estimate_worker(tiny_shape(2), range(2), True, MB, MemoryModel(reserve_bytes=3 * GIB))
    admit(est, est.total, "gpu0")  # exactly enough is admitted
    with pytest.raises(AdmissionError) as err:
        admit(est, 2 * GIB, "gpu0")
    message = str(err.value)
    assert message.startswith("worker 'gpu0' refused admission: estimated peak 3.000 GiB")
    assert f"({est.total} bytes) for blocks [0, 2) plus embeddings" in message
    assert f"exceeds the 2.000 GiB ({2 * GIB} bytes) actually free, short by 1.000 GiB" in message
    with pytest.raises(ValueError, match="field 'free_bytes' = -1"):
        admit(est, -1, "gpu0")


def test_shape_with_growth():
    grown = shape_with_growth(tiny_shape(3), 2)
    assert grown.num_hidden_layers == 5 and grown.block_param_count() == 152
    with pytest.raises(ValueError, match="extra_blocks"):
        shape_with_growth(tiny_shape(3), -1)
