"""What every seed directory holds beside its tokenizer, written the same way at every scale.

The weights and their configs (FP32, Hugging Face names, no lm_head.weight), every conversation trained
on, and seed_build.json, whose common fields (docs/formats/seed-directory.md) each scale extends with its own.
"""

from __future__ import annotations

import json
import platform
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes

import kit
from kit.data.conversations import Conversation, write_jsonl
from kit.digest import write_bytes_atomic
from kit.inventory import parameter_digest
from kit.model.config import LlamaShape
from kit.model.llama import LlamaCausalLM
from kit.record import Either, MapOf, Omittable, Opt, Record, Seq, spec_field

TRAINED_CONVERSATIONS_FILE = "trained_conversations.jsonl"
SEED_BUILD_FILE = "seed_build.json"
WEIGHTS_FILE = "model.safetensors"
FINAL_LOSS_WINDOW = 10  # the final loss is the mean over the last updates (each on unseen data)


def write_model_files(staging: Path, model: LlamaCausalLM, shape: LlamaShape) -> None:
    config = json.dumps(shape.to_hf_dict(), indent=2, sort_keys=True) + "\n"
    write_bytes_atomic(staging / "config.json", config.encode("utf-8"))
    generation = {"bos_token_id": shape.bos_token_id, "eos_token_id": shape.eos_token_id,
                  "pad_token_id": shape.pad_token_id}
    write_bytes_atomic(staging / "generation_config.json",
                       (json.dumps(generation, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    # named_parameters of a tied model has no lm_head.weight: exactly what Hugging Face stores.
    tensors = {name: p.detach().to(torch.float32).contiguous().clone() for name, p in model.named_parameters()}
    # safetensors' own serialisation (the bytes save_file writes), written like every other kit
    # file: atomically, fsynced, with ordinary permissions (save_file leaves the file mode 0600).
    write_bytes_atomic(staging / WEIGHTS_FILE, safetensors_bytes(tensors, metadata={"format": "pt"}))


def write_seed_files(staging: Path, model: LlamaCausalLM, trained: list[Conversation]) -> tuple[str, str]:
    """The weights, configs and trained conversations (each once, in training order) into `staging`;
    returns (trained_conversations.jsonl's sha256, the parameter digest)."""
    write_model_files(staging, model, model.shape)
    trained_sha256 = write_jsonl(staging / TRAINED_CONVERSATIONS_FILE, trained)
    return trained_sha256, parameter_digest(staging)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuNumerics(Record):
    """The GPU settings of a numeric profile (null on a CPU)."""

    deterministic_algorithms: bool = spec_field(bool)
    cublas_workspace_config: str | None = spec_field(Opt(str))
    tf32: bool = spec_field(bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedNumericProfile(Record):
    """seed_build.json's `numeric_profile`: the object kit.numerics.apply() returned (docs/engine.md
    "Determinism")."""

    name: str = spec_field(str)
    environment: Mapping[str, str] = spec_field(MapOf(str), doc="the variables the profile sets")
    intra_op_threads: int = spec_field(int)
    aten_cpu_capability: str = spec_field(str)
    mkl_cbwr_branch: str | int | None = spec_field(Opt(Either(str, int)),
                                                   doc="its name, MKL's number for an unnamed one; null without MKL")
    mkldnn_enabled: bool = spec_field(bool)
    torch: str = spec_field(str)
    gpu: GpuNumerics | None = spec_field(Opt(GpuNumerics))


@dataclass(frozen=True, slots=True, kw_only=True)
class LearningRate(Record):
    schedule: str = spec_field(str)
    peak: float = spec_field(float)
    warmup_updates: int = spec_field(int)
    final: float = spec_field(float, doc="the rate of the last update")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommonSeedRecord(Record):
    """The fields of seed_build.json every scale writes (docs/formats/seed-directory.md); each scale's writer
    adds its own beside them."""

    kit_version: str = spec_field(str)
    config: Mapping[str, Any] = spec_field(MapOf(Opt(Either(float, str))), doc="every field of the build config")
    params: int = spec_field(int, doc="parameter count")
    vocab_size: int = spec_field(int)
    updates: int = spec_field(int)
    learning_rate: LearningRate = spec_field(LearningRate)
    loss_initial: float = spec_field(float)
    loss_final: float = spec_field(float, doc="mean of the last 10 updates")
    loss_every_10_updates: tuple[float, ...] = spec_field(Seq(float))
    torch_version: str = spec_field(str)
    python_version: str = spec_field(str)
    machine: str = spec_field(str)
    numeric_profile: SeedNumericProfile = spec_field(SeedNumericProfile)
    parameter_digest: str = spec_field(str)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildSeconds(Record):
    """The medium seed's `seconds`: each phase's."""

    inputs_and_tasks: float = spec_field(float)
    tokenizer: float = spec_field(float)
    encode_and_pack: float = spec_field(float)
    train: float = spec_field(float)
    total: float = spec_field(float)


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedBuildSummary(Record):
    """What `kit seed describe` reads of a seed directory's seed_build.json (the rest of the record is each
    scale's: docs/formats/seed-directory.md). The tiny seed records its thread count and its seconds as a number,
    the medium one its device and each phase's seconds."""

    kit_version: str = spec_field(str)
    torch_version: str = spec_field(str)
    updates: int = spec_field(int)
    loss_initial: float = spec_field(float)
    loss_final: float = spec_field(float)
    seconds: float | BuildSeconds = spec_field(Either(float, BuildSeconds))
    threads: int | None = spec_field(Omittable(int), doc="the tiny seed's")
    device: str | None = spec_field(Omittable(str), doc="the medium seed's")

    @property
    def total_seconds(self) -> float:
        return self.seconds.total if isinstance(self.seconds, BuildSeconds) else self.seconds


def read_build_summary(value: Any, source: str) -> SeedBuildSummary:
    """seed_build.json's fields `SeedBuildSummary` declares, checked (the others are not read here)."""
    fields = SeedBuildSummary.json_fields()
    return SeedBuildSummary.from_json({k: v for k, v in value.items() if k in fields} if isinstance(value, dict)
                                      else value, source)


def common_record(cfg, shape: LlamaShape, vocab_size: int, losses: list[float], final_lr: float,
                  profile: dict, digest: str) -> CommonSeedRecord:
    """The fields of seed_build.json every scale writes: the kit, the config, the schedule, the losses,
    the software and the digest (`profile`: what kit.numerics.apply() returned)."""
    return CommonSeedRecord(
        kit_version=kit.__version__,
        config=types.MappingProxyType(asdict(cfg)),
        params=shape.param_count(),
        vocab_size=vocab_size,
        updates=len(losses),
        learning_rate=LearningRate(schedule="linear warm-up then cosine", peak=cfg.lr,
                                   warmup_updates=cfg.warmup_updates, final=final_lr),
        loss_initial=losses[0],
        loss_final=final_loss(losses),
        loss_every_10_updates=tuple(round(x, 4) for x in losses[::10]),
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        machine=platform.machine(),
        numeric_profile=SeedNumericProfile.from_json(profile, "the numeric profile (kit.numerics.apply)"),
        parameter_digest=digest,
    )


def final_loss(losses: list[float]) -> float:
    """seed_build.json's `loss_final`: the mean over the last FINAL_LOSS_WINDOW updates."""
    return float(np.mean(losses[-FINAL_LOSS_WINDOW:]))


def write_record(staging: Path, record: dict) -> None:
    write_bytes_atomic(staging / SEED_BUILD_FILE, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
