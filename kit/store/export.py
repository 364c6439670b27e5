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

import errno
import os
import shutil
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import save_file

from kit.digest import loads_strict
from kit.inventory import parameter_digest
from kit.model.config import LlamaShape, check_params_match_config, parse_config
from kit.store.commits import read_manifest
from kit.store.objects import ObjectStore, StoreError
from kit.store.params import non_finite, parameter_tensor

WEIGHTS_FILE = "model.safetensors"


def _umask() -> int:
    """The process's umask (read by setting it and putting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
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
    return set(shape.parameter_shapes())


def export_hf(
    home: str | os.PathLike,
    root: str,
    out_dir: str | os.PathLike,
    extra_files_dir: str | os.PathLike | None = None,
) -> str:
    """Write commit `root` of store `home` into `out_dir` (new or empty); returns its `kit digest`."""
    manifest = read_manifest(home, root)
    store = ObjectStore(home)
    config_digest = manifest.layout.model_config
    config_bytes = store.get_bytes(config_digest)
    config_source = f"{store.path(config_digest)} (model config of commit {root})"
    shape = parse_config(loads_strict(config_bytes, config_source), config_source)

    entries = manifest.learned_state.params
    try:  # names and shapes: an export must never write tensors that contradict its config.json
        check_params_match_config({e.name: e.shape for e in entries}, shape, f"commit {root}", config_source)
    except ValueError as e:
        raise ExportError(str(e)) from None
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out}: export target must be a new or empty directory")
    extra = Path(extra_files_dir) if extra_files_dir is not None else None
    if extra is not None and not extra.is_dir():
        raise ExportError(f"{extra}: tokenizer source directory does not exist")

    tensors = {e.name: parameter_tensor(store, e) for e in entries}  # parameters only, no moments
    bad = [problem for name, t in tensors.items() if (problem := non_finite(t, f"parameter {name}"))]
    if bad:  # a model of NaN or infinities loads and answers garbage: refused before a file is written
        raise ExportError(f"{Path(home) / 'commits' / (root + '.json')}: commit {root} holds non-finite "
                          f"parameters, refusing to export them: {len(bad)} tensor(s), "
                          + "; ".join(bad[:3]) + ("; ..." if len(bad) > 3 else ""))
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        written.append(out / WEIGHTS_FILE)
        save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
        os.chmod(out / WEIGHTS_FILE, 0o666 & ~_umask())  # safetensors writes 0600: as any other file written here
        written.append(out / CONFIG_FILE)
        (out / CONFIG_FILE).write_bytes(config_bytes)
        if extra is not None:
            for name in tokenizer_files(extra):
                written.append(out / name)
                shutil.copyfile(extra / name, out / name)
    except (OSError, SafetensorError) as e:  # a full disk (safetensors raises its own error): leave nothing half-written
        for path in written:
            path.unlink(missing_ok=True)
        if created:
            out.rmdir()
        reason = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())[:300]
        raise OSError(getattr(e, "errno", None) or errno.EIO,
                      f"{written[-1]}: export failed while writing it ({type(e).__name__}: {reason}); "
                      f"removed what the export wrote under {out}") from None
    return parameter_digest(out)
