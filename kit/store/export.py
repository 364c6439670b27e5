"""Export a commit as a Hugging Face Llama directory (`kit checkpoint export ROOT --out DIR`).

The directory holds `model.safetensors` (every FP32 parameter of the learned state under its
Hugging Face name), `config.json` (the commit's model-config object, byte for byte, so a grown
depth travels with it) and, when a source directory is given, every tokenizer file it holds (the chat
template included, so that the export passes `kit seed show` and chats like its seed). It loads with
`transformers.LlamaForCausalLM.from_pretrained(DIR)`. With tied embeddings the learned state has
no `lm_head.weight` and none is written; transformers ties the head to `model.embed_tokens.weight`.

The parameter set is checked against the config before anything is written: a missing or
unexpected tensor would otherwise be silently re-initialised or dropped by the loader.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from safetensors.torch import save_file

from kit.digest import loads_strict
from kit.inventory import parameter_digest
from kit.model.config import LlamaShape, parse_config
from kit.store.commits import read_commit
from kit.store.objects import ObjectStore, StoreError
from kit.store.params import parameter_tensor

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "chat_template.jinja", "chat_template.json", "added_tokens.json", "vocab.json", "merges.txt",
                   "tokenizer.model")
# what else a tokenizer may have been saved as (transformers writes the chat template to
# chat_template.jinja since v5; slow tokenizers keep vocab files): copied whenever present
TOKENIZER_PATTERNS = ("tokenizer*", "*.jinja", "vocab.*", "*.tiktoken", "spiece.model")


def tokenizer_files(source: Path) -> list[str]:
    """Every tokenizer-related file of `source` (not weights, not config.json, not the seed's records)."""
    found = {n for n in TOKENIZER_FILES if (source / n).is_file()}
    found |= {p.name for pattern in TOKENIZER_PATTERNS for p in source.glob(pattern) if p.is_file()}
    return sorted(found)


class ExportError(StoreError):
    """A commit cannot be written as a Hugging Face directory; the message says why."""


def hf_parameter_names(shape: LlamaShape) -> set[str]:
    """The trainable parameter names of `LlamaForCausalLM` for this shape (no buffers)."""
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not shape.tie_word_embeddings:
        names.add("lm_head.weight")
    for i in range(shape.num_hidden_layers):
        block = f"model.layers.{i}"
        names.update(f"{block}.{norm}.weight" for norm in ("input_layernorm", "post_attention_layernorm"))
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names.add(f"{block}.self_attn.{proj}.weight")
            if shape.attention_bias:
                names.add(f"{block}.self_attn.{proj}.bias")
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names.add(f"{block}.mlp.{proj}.weight")
            if shape.mlp_bias:
                names.add(f"{block}.mlp.{proj}.bias")
    return names


def export_hf(
    home: str | os.PathLike,
    root: str,
    out_dir: str | os.PathLike,
    extra_files_dir: str | os.PathLike | None = None,
) -> str:
    """Write commit `root` of store `home` into `out_dir` (new or empty); returns its `kit digest`."""
    manifest = read_commit(home, root)
    store = ObjectStore(home)
    config_digest = manifest["layout"]["model_config"]
    config_bytes = store.get_bytes(config_digest)
    config_source = f"{store.path(config_digest)} (model config of commit {root})"
    shape = parse_config(loads_strict(config_bytes, config_source), config_source)

    entries = manifest["learned_state"]["params"]
    names = {e["name"] for e in entries}
    expected = hf_parameter_names(shape)
    if names != expected:
        missing, unexpected = sorted(expected - names), sorted(names - expected)
        raise ExportError(
            f"commit {root}: parameters do not match {config_source}: missing {missing[:5]} "
            f"({len(missing)}), unexpected {unexpected[:5]} ({len(unexpected)})"
        )
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out}: export target must be a new or empty directory")
    extra = Path(extra_files_dir) if extra_files_dir is not None else None
    if extra is not None and not extra.is_dir():
        raise ExportError(f"{extra}: tokenizer source directory does not exist")

    tensors = {e["name"]: parameter_tensor(store, e) for e in entries}  # parameters only, no moments
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / CONFIG_FILE).write_bytes(config_bytes)
    if extra is not None:
        for name in tokenizer_files(extra):
            shutil.copyfile(extra / name, out / name)
    return parameter_digest(out)
