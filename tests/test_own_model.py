"""docs/own-model.md, followed step by step: a Hugging Face Llama saved by transformers in bfloat16,
sharded, with a fast tokenizer whose chat template transformers saves as chat_template.jinja, and a
replay file written from the public source (the model has no trained_conversations.jsonl). Then
`kit digest` -> a copied contract with the digest pinned -> prepare -> 2 updates -> export -> `kit seed
show` on the export, which transformers loads with its tokenizer and chat template."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from kit.cli import main
from kit.data.conversations import instruction_source_range, synthetic_conversations, write_jsonl
from kit.data.tokenizer_build import build_tokenizer
from kit.digest import sha256_file

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO / "data" / "alpaca_5000.json"


def _kit(capsys, *args) -> str:
    capsys.readouterr()
    assert main([str(a) for a in args]) == 0, args
    return capsys.readouterr().out


def _own_model(tmp: Path) -> Path:
    """What a user has: save_pretrained output of a model and a tokenizer made elsewhere."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    rng = instruction_source_range(PUBLIC, sha256_file(PUBLIC), 0, 400, "alpaca_5000")
    texts = [m.content for c in rng.conversations for m in c.messages]
    texts += [m.content for c in synthetic_conversations(100, seed=0) for m in c.messages]
    build_tokenizer(texts, 600, tmp / "tok")
    model_dir = tmp / "my-model"
    tok = AutoTokenizer.from_pretrained(tmp / "tok")
    tok.save_pretrained(model_dir)  # transformers 5: the template goes to chat_template.jinja
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(model_dir, max_shard_size="40KB")
    return model_dir


def test_own_bf16_sharded_model_prepares_trains_exports_and_loads(tmp_path, capsys, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("KIT_PROGRESS", "0")
    model_dir = _own_model(tmp_path)
    shards = sorted(p.name for p in model_dir.glob("*.safetensors"))
    assert len(shards) > 1 and (model_dir / "model.safetensors.index.json").is_file()
    assert (model_dir / "chat_template.jinja").is_file()
    assert "chat_template" not in json.loads((model_dir / "tokenizer_config.json").read_text())
    assert not (model_dir / "trained_conversations.jsonl").exists()

    # the replay file: conversations the model may keep seeing, from records the contract's finals never use
    rng = instruction_source_range(PUBLIC, sha256_file(PUBLIC), 0, 2048, "alpaca_5000")
    replay = tmp_path / "replay.jsonl"
    write_jsonl(replay, rng.conversations[:400])

    digest = _kit(capsys, "digest", model_dir).strip()
    contract = json.loads((REPO / "contracts" / "adaptive-shards.tiny.json").read_text())
    contract["seed"]["parameter_digest"] = digest
    contract["training"]["commit_every"] = 2  # a commit after the 2 updates this test trains
    mine = tmp_path / "my-contract.json"
    mine.write_text(json.dumps(contract, indent=1))

    prepared, home = tmp_path / "prepared", tmp_path / "A2"
    out = _kit(capsys, "adaptive", "prepare", "--contract", mine, "--seed", model_dir, "--replay", replay,
               "--public-source", PUBLIC, "--out", prepared, "--ledger", tmp_path / "ledger.jsonl")
    assert json.loads(out)["parameter_digest"] == digest
    pj = json.loads((prepared / "prepared.json").read_text())
    assert pj["seed"]["parameter_digest"] == digest and "chat_template.jinja" in pj["tokenizer"]

    out = _kit(capsys, "adaptive", "train", "--prepared", prepared, "--seed", model_dir, "--home", home,
               "--cohort", "A", "--workers", 2, "--until", 2)
    commit = json.loads(out.strip().splitlines()[-1])
    assert commit["cohort_step"] == 2
    root = commit["full_root"]
    from kit.store.commits import read_commit

    entries = read_commit(home, root)["learned_state"]["params"]
    assert {e["dtype"] for e in entries} == {"float32"}  # FP32 masters (and moments) of the bf16 seed

    export = tmp_path / "export"
    exported_digest = _kit(capsys, "checkpoint", "export", root, "--home", home, "--out", export,
                           "--tokenizer-from", model_dir).strip()
    assert (export / "chat_template.jinja").read_bytes() == (model_dir / "chat_template.jinja").read_bytes()
    shown = _kit(capsys, "seed", "show", export)
    assert "chat template present" in shown and f"parameter digest: {exported_digest}" in shown
    assert exported_digest != digest  # trained, and stored as float32

    # config.json is the commit's (the seed's) byte for byte, so its "dtype": "bfloat16" would make
    # transformers load the float32 weights as bfloat16; ask for float32 to get the trained masters
    assert json.loads((export / "config.json").read_text())["dtype"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    from safetensors.torch import load_file

    weights = load_file(export / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in weights.values())
    assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters() if n in weights)
    tok, original = AutoTokenizer.from_pretrained(export), AutoTokenizer.from_pretrained(model_dir)
    chat = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}]
    assert tok.apply_chat_template(chat, tokenize=False) == original.apply_chat_template(chat, tokenize=False)
    assert model.dtype == torch.float32 and model.config.num_hidden_layers == 4
    seed = AutoModelForCausalLM.from_pretrained(model_dir)
    moved = [n for n, p in model.named_parameters()
             if not torch.equal(p, dict(seed.named_parameters())[n].float())]
    assert moved  # two updates changed the weights that transformers now loads


def guide_blocks() -> list[str]:
    """The ```bash blocks of docs/own-model.md, in order (other fences are illustration, not run)."""
    return re.findall(r"^```bash\n(.*?)^```$", (REPO / "docs" / "own-model.md").read_text(), re.DOTALL | re.MULTILINE)


def test_the_guide_runs_verbatim_from_an_empty_folder_outside_the_clone(tmp_path):
    """Issue 52, item 11: every bash block of the guide, as written, in one shell, from an empty folder that
    is not inside the clone; the kit found through the venv on PATH, as the guide asks."""
    blocks = guide_blocks()
    assert len(blocks) == 7 and all("$KIT_CLONE" in b or "KIT_CLONE" not in b for b in blocks)
    assert not tmp_path.resolve().is_relative_to(REPO) and not list(tmp_path.iterdir())
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(REPO))
    git = ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"]
    before = subprocess.run(git, capture_output=True, text=True, check=False).stdout
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(blocks)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    work = tmp_path / "my-kit-work"
    digest = json.loads((work / "prepared" / "prepared.json").read_text())["seed"]["parameter_digest"]
    assert json.loads((work / "my-contract.json").read_text())["seed"]["parameter_digest"] == digest
    assert f"parameter digest: {digest}" in done.stdout and '"rope_parameters"' in done.stdout
    first = json.loads((work / "my-replay.jsonl").read_text().splitlines()[0])
    assert set(first) == {"id", "messages", "source", "index"}  # the fields the guide names, as written
    head = (work / "A2" / "HEAD").read_text().strip()
    assert f"HEAD {head} (cohort 0 step 2" in done.stdout and "last update 2: ce/token " in done.stdout
    assert (work / "my-model-trained" / "chat_template.jinja").is_file() and "torch.float32" in done.stdout
    after = subprocess.run(git, capture_output=True, text=True, check=False).stdout
    assert after == before  # nothing written into the clone
