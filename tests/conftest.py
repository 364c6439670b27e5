"""Shared fixtures: tiny Hugging Face Llama directories written by transformers itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import kit
import kit.numerics

# The test process computes under the same profile as the launched workers and the CLI, so in-process
# and launched results are comparable bit for bit.
kit.numerics.apply()

REPO = Path(__file__).resolve().parents[1]
PUBLIC_SOURCE = REPO / "data" / "alpaca_5000.json"  # in the repository (data/SOURCE.md)


def write_hf_llama(out: Path, *, vocab=64, hidden=32, layers=3, heads=4, kv_heads=2, inter=48, tied=True,
                   seed=0, rope_scaling=None) -> Path:
    """A random LlamaForCausalLM saved with save_pretrained (safetensors); transformers is the oracle."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=128,
                      tie_word_embeddings=tied, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=rope_scaling)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # non-trivial norms so that a missed norm weight shows up
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(out, safe_serialization=True)
    return out


@pytest.fixture
def tiny_llama(tmp_path):
    return write_hf_llama(tmp_path / "tiny")


@pytest.fixture(scope="module")
def student_reference(tmp_path_factory):
    """A random student seed and a different random reference (seeds 0 and 1), shared by a module's tests."""
    root = tmp_path_factory.mktemp("student-reference")
    return write_hf_llama(root / "student", seed=0), write_hf_llama(root / "reference", seed=1)


@pytest.fixture
def one_thread():
    """One torch thread, as the launcher's workers use: the same kernels, so comparable bits."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load_json(path):
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="session", autouse=True)
def _session_exposure_ledger(tmp_path_factory):
    """Module- and session-scoped preparations read an empty ledger of the session, never the
    repository's ledger/exposed.jsonl."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KIT_LEDGER", str(tmp_path_factory.mktemp("session-ledger") / "exposed.jsonl"))
        yield


@pytest.fixture(autouse=True)
def _private_exposure_ledger(tmp_path_factory, monkeypatch):
    """Every test records final exposures to (and prepares against) a ledger of its own; a test that
    wants a shared ledger sets KIT_LEDGER itself."""
    monkeypatch.setenv("KIT_LEDGER", str(tmp_path_factory.mktemp("ledger") / "exposed.jsonl"))
