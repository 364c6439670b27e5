"""Length buckets (issue 14, item 8): on CUDA each microbatch is padded up to a multiple of 64 so the
attention plans are reused; padding is never a target and never seen by a real position, so the loss
and gradients are the same function of the real tokens. CPU keeps exact lengths (no result changes)."""

from __future__ import annotations

import pytest
import torch
from support.engine import OPT, make_batches
from support.engine_workers import build_engine, records_from_json
from support.models import write_hf_llama

from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig
from kit.model.shard import even_layout
from kit.study.measurement import padded_tokens as _padded_tokens
from kit.train.batch import make_microbatches
from kit.train.optim import GroupConfig


def test_buckets_are_on_for_cuda_only_by_default():
    cfg = EngineConfig(2, 1.0)
    assert cfg.bucket_for(torch.device("cpu")) == 0 and cfg.bucket_for(torch.device("cuda", 0)) == 64
    assert EngineConfig(2, 1.0, length_bucket=16).bucket_for(torch.device("cpu")) == 16
    with pytest.raises(ValueError, match="length_bucket"):
        EngineConfig(2, 1.0, length_bucket=-1)


def test_bucketed_microbatches_pad_to_the_bucket_with_no_new_targets():
    recs = records_from_json(make_batches(1)[0])
    plain = make_microbatches(recs, 2)
    bucketed = make_microbatches(recs, 2, length_bucket=16)
    for a, b in zip(plain, bucketed):
        T = a.shape[1]
        assert b.shape == (a.shape[0], 16 * -(-T // 16))
        assert torch.equal(b.ids[:, :T], a.ids) and torch.equal(b.target_mask[:, :T], a.target_mask)
        assert not b.target_mask[:, T:].any() and (b.ids[:, T:] == 0).all()
    assert _padded_tokens(recs, 2, 16) == sum(b.ids.numel() for b in bucketed)
    assert _padded_tokens(recs, 2, 0) == sum(a.ids.numel() for a in plain)


def test_padding_to_a_bucket_changes_no_loss_value(tmp_path):
    seed, ref = write_hf_llama(tmp_path / "s", seed=0), write_hf_llama(tmp_path / "r", seed=1)
    rows = make_batches(1)[0]
    out = []
    for bucket in (0, 32):
        eng = build_engine(Group(0, 1, torch.device("cpu")), str(seed), str(ref), even_layout(3, 1),
                           EngineConfig(2, 1.0, length_bucket=bucket), {"default": GroupConfig(**OPT)})
        eng.capture_grads = True
        out.append((eng.update(records_from_json(rows)), eng.last_grads))
    (a, ga), (b, gb) = out
    for key in ("ce_sum", "kl_sum", "objective"):
        assert getattr(b.parts, key) == pytest.approx(getattr(a.parts, key), rel=1e-5, abs=1e-7)
    assert set(ga) == set(gb)
    for n in ga:
        assert (ga[n] - gb[n]).abs().max().item() <= 1e-6, n
