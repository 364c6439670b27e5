"""The append transition: identity at insertion, old state untouched, new Adam clocks."""

from __future__ import annotations

import math

import pytest
import torch
from support.engine import OPT, make_batches
from support.engine_workers import engine_config, records_from_json
from support.models import write_hf_llama

from kit.adaptive.growth import grow_commit
from kit.distributed.group import Group
from kit.engine.session import Session
from kit.model.llama import LlamaCausalLM
from kit.model.shard import even_layout
from kit.store import commits
from kit.store.objects import ObjectStore
from kit.store.start import start_from_commit, start_from_seed
from kit.train.optim import GroupConfig

CPU = Group(0, 1, torch.device("cpu"))
ENGINE = engine_config({"microbatch_size": 2, "max_grad_norm": 1.0})
GROUPS = {"default": GroupConfig(**OPT), "grown": GroupConfig(**OPT)}


def _full_model(home, root):
    start = start_from_commit(str(home), root)
    model = LlamaCausalLM(start.shape)
    states = commits.load_param_states(ObjectStore(home), start.manifest["learned_state"]["params"])
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(states[n]["param"])
    return model, start


@pytest.fixture
def trained(tmp_path):
    seed = write_hf_llama(tmp_path / "seed", layers=3)
    home = tmp_path / "home"
    s = Session(CPU, str(home), even_layout(3, 1), start_from_seed(str(seed)), ENGINE, GROUPS,
                reference={"seed_dir": str(seed)})
    for rows in make_batches(2):
        s.update(records_from_json(rows))
    root, _ = s.commit()
    return home, root, seed


def test_growth_is_identity_and_keeps_old_state(trained):
    home, root, _seed = trained
    grown = grow_commit(str(home), root, add=2, copy_from=1, group="grown")
    before, start_a = _full_model(home, root)
    after, start_b = _full_model(home, grown)
    assert start_b.shape.num_hidden_layers == 5
    m = commits.read_commit(home, grown)
    assert m["parent"] == root
    ids = torch.randint(0, 64, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(before(ids), after(ids))  # exactly the identity, not approximately
    old = {e["name"]: e for e in start_a.manifest["learned_state"]["params"]}
    new = {e["name"]: e for e in m["learned_state"]["params"]}
    for n, e in old.items():
        assert new[n] == e  # same objects (bit-identical tensors), ages and groups
    added = sorted(set(new) - set(old))
    assert len(added) == 2 * 9 and all(n.startswith(("model.layers.3.", "model.layers.4.")) for n in added)
    for n in added:
        assert new[n]["age"] == 0 and new[n]["group"] == "grown"
        src = old[n.replace("layers.3.", "layers.1.").replace("layers.4.", "layers.1.")]
        if "o_proj" in n or "down_proj" in n:
            assert torch.count_nonzero(ObjectStore(home).get_tensor(new[n]["param"], "float32", new[n]["shape"])) == 0
        else:
            assert new[n]["param"] == src["param"]
    commits.verify_commit(home, grown)


def test_after_one_update_new_ages_start_and_values_are_finite(trained):
    home, root, _seed = trained
    grown = grow_commit(str(home), root, add=2, copy_from=1, group="grown")
    s = Session(CPU, str(home), even_layout(5, 1), start_from_commit(str(home), grown), ENGINE, GROUPS,
                reference=None)
    rows = [dict(r, replay=False) for r in make_batches(1, seed=5)[0]]
    res = s.update(records_from_json(rows))
    assert math.isfinite(res.parts.objective) and math.isfinite(res.grad_norm)
    r2, _ = s.commit()
    m_old = commits.read_commit(home, grown)
    m_new = commits.read_commit(home, r2)
    ages_old = {e["name"]: e["age"] for e in m_old["learned_state"]["params"]}
    store = ObjectStore(home)
    for e in m_new["learned_state"]["params"]:
        assert e["age"] == ages_old[e["name"]] + 1
        for f in ("param", "exp_avg", "exp_avg_sq"):
            assert torch.isfinite(store.get_tensor(e[f], "float32", e["shape"])).all()
    assert {e["age"] for e in m_new["learned_state"]["params"] if ".layers.4." in e["name"]} == {1}
    assert m_new["learned_state"]["cursor"]["step"] == 3


def test_growth_refuses_bad_arguments(trained):
    home, root, _ = trained
    with pytest.raises(ValueError, match="copies block 7"):
        grow_commit(str(home), root, add=1, copy_from=7, group="grown")
    with pytest.raises(ValueError, match="adds 0 blocks"):
        grow_commit(str(home), root, add=0, copy_from=0, group="grown")


def test_admission_refuses_before_allocating(trained, monkeypatch):
    import kit.engine.admission as session_mod

    home, root, _seed = trained
    monkeypatch.setattr(session_mod, "free_memory_bytes", lambda device: 1000)
    with pytest.raises(ValueError, match=r"rank 0 \(cpu\).*1000|1000.*rank 0 \(cpu\)"):
        Session(CPU, str(home), even_layout(3, 1), start_from_commit(str(home), root), ENGINE, GROUPS)
