"""The shape of a Llama model, parsed and validated from a Hugging Face `config.json` (no torch).

Errors name the file, the field and what was expected, so a non-Llama or malformed config is
refused before any tensor is read. Both spellings of the rotary settings are accepted: the
classic `rope_theta` + `rope_scaling` (transformers 4.x) and `rope_parameters` (transformers 5.x).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kit.digest import load_json_strict

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
LLAMA_ARCHITECTURES = ("LlamaForCausalLM",)


class ConfigError(ValueError):
    pass


# Upper bounds checked before anything is allocated (a config is input like any other: `vocab_size`
# 2**31 or `num_hidden_layers` 1e9 must be refused, not tried). Each is far above any Llama released.
LIMITS = {
    "vocab_size": 1 << 22,
    "hidden_size": 1 << 16,
    "intermediate_size": 1 << 18,
    "num_hidden_layers": 1 << 10,
    "num_attention_heads": 1 << 10,
    "num_key_value_heads": 1 << 10,
    "head_dim": 1 << 12,
    "max_position_embeddings": 1 << 22,
}
MAX_PARAMETERS = 1 << 40  # about 1.1 trillion


@dataclass(frozen=True)
class RopeSpec:
    rope_type: str = "default"
    theta: float = 10000.0
    factor: float = 1.0
    # llama3 only
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaShape:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    rope: RopeSpec = field(default_factory=RopeSpec)
    attention_bias: bool = False
    mlp_bias: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    torch_dtype: str = "float32"

    def to_hf_dict(self) -> dict[str, Any]:
        """A config.json that transformers' LlamaConfig reads back to the same shape."""
        rope_scaling = None
        if self.rope.rope_type == "linear":
            rope_scaling = {"rope_type": "linear", "factor": self.rope.factor}
        elif self.rope.rope_type == "llama3":
            rope_scaling = {
                "rope_type": "llama3",
                "factor": self.rope.factor,
                "low_freq_factor": self.rope.low_freq_factor,
                "high_freq_factor": self.rope.high_freq_factor,
                "original_max_position_embeddings": self.rope.original_max_position_embeddings,
            }
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_theta": self.rope.theta,
            "rope_scaling": rope_scaling,
            "attention_bias": self.attention_bias,
            "attention_dropout": 0.0,
            "mlp_bias": self.mlp_bias,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": self.torch_dtype,
            "use_cache": True,
        }

    def with_layers(self, num_hidden_layers: int) -> LlamaShape:
        return replace(self, num_hidden_layers=num_hidden_layers)

    def block_param_count(self) -> int:
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        q = h * self.num_attention_heads * d
        kv = 2 * h * self.num_key_value_heads * d
        o = self.num_attention_heads * d * h
        mlp = 3 * h * i
        bias = (self.num_attention_heads + 2 * self.num_key_value_heads) * d + h if self.attention_bias else 0
        bias += (2 * i + h) if self.mlp_bias else 0
        return q + kv + o + mlp + 2 * h + bias

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every trainable parameter's name (Hugging Face spelling, also the kit's) and shape; no torch."""
        h, i, q, kv = self.hidden_size, self.intermediate_size, self.num_attention_heads * self.head_dim, \
            self.num_key_value_heads * self.head_dim
        shapes = {"model.embed_tokens.weight": (self.vocab_size, h), "model.norm.weight": (h,)}
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        projections = {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
                       "self_attn.o_proj": (h, q), "mlp.gate_proj": (i, h), "mlp.up_proj": (i, h),
                       "mlp.down_proj": (h, i)}
        for layer in range(self.num_hidden_layers):
            block = f"model.layers.{layer}"
            shapes[f"{block}.input_layernorm.weight"] = (h,)
            shapes[f"{block}.post_attention_layernorm.weight"] = (h,)
            for name, (out, inp) in projections.items():
                shapes[f"{block}.{name}.weight"] = (out, inp)
                if self.attention_bias if name.startswith("self_attn") else self.mlp_bias:
                    shapes[f"{block}.{name}.bias"] = (out,)
        return shapes

    def param_count(self) -> int:
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        return emb + head + self.hidden_size + self.num_hidden_layers * self.block_param_count()


def _get(cfg: dict, key: str, source: str, kind: type | tuple, default: Any = ..., positive: bool = False):
    if key not in cfg or cfg[key] is None:
        if default is ...:
            raise ConfigError(f"{source}: field {key!r} is missing; expected {_kind_name(kind)}")
        return default
    value = cfg[key]
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, float, (int, float)))
    if not ok:
        raise ConfigError(f"{source}: field {key!r} = {value!r}; expected {_kind_name(kind)}")
    if positive and not value > 0:
        raise ConfigError(f"{source}: field {key!r} = {value!r}; expected a positive number")
    return value


def _kind_name(kind) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def _parse_rope(cfg: dict, source: str) -> RopeSpec:
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and params:
        scaling = params
        theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
        where = "rope_parameters"
    else:
        scaling = cfg.get("rope_scaling") or {}
        theta = cfg.get("rope_theta", 10000.0)
        where = "rope_scaling"
    if not isinstance(scaling, dict):
        raise ConfigError(f"{source}: field {where!r} = {scaling!r}; expected an object or null")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
        raise ConfigError(f"{source}: field 'rope_theta' = {theta!r}; expected a positive number")
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ConfigError(
            f"{source}: field '{where}.rope_type' = {rope_type!r} is not supported; "
            f"expected one of {', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    if rope_type == "default":
        return RopeSpec("default", float(theta))
    factor = _get(scaling, "factor", f"{source} ({where})", (int, float), positive=True)
    if rope_type == "linear":
        return RopeSpec("linear", float(theta), float(factor))
    return RopeSpec(
        "llama3",
        float(theta),
        float(factor),
        float(_get(scaling, "low_freq_factor", f"{source} ({where})", (int, float), positive=True)),
        float(_get(scaling, "high_freq_factor", f"{source} ({where})", (int, float), positive=True)),
        int(_get(scaling, "original_max_position_embeddings", f"{source} ({where})", int, positive=True)),
    )


def parse_config(cfg: Any, source: str = "config.json") -> LlamaShape:
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    if model_type != "llama":
        raise ConfigError(f"{source}: field 'model_type' = {model_type!r}; expected 'llama'")
    if archs and not any(a in LLAMA_ARCHITECTURES for a in archs):
        raise ConfigError(f"{source}: field 'architectures' = {archs!r}; expected ['LlamaForCausalLM']")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"{source}: field 'hidden_act' = {act!r}; expected 'silu' (SwiGLU)")
    for key in ("attention_dropout",):
        if cfg.get(key, 0.0) not in (0, 0.0):
            raise ConfigError(f"{source}: field {key!r} = {cfg[key]!r}; expected 0 (the dropout-free profile)")
    if cfg.get("pretraining_tp", 1) not in (1, None):
        raise ConfigError(f"{source}: field 'pretraining_tp' = {cfg['pretraining_tp']!r}; expected 1")
    hidden = _get(cfg, "hidden_size", source, int, positive=True)
    heads = _get(cfg, "num_attention_heads", source, int, positive=True)
    kv_heads = _get(cfg, "num_key_value_heads", source, int, default=heads, positive=True)
    head_dim = _get(cfg, "head_dim", source, int, default=None)
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(
                f"{source}: field 'hidden_size' = {hidden} is not divisible by num_attention_heads = {heads}"
            )
        head_dim = hidden // heads
    if head_dim <= 0 or head_dim % 2:
        raise ConfigError(f"{source}: field 'head_dim' = {head_dim}; expected a positive even number")
    if heads % kv_heads:
        raise ConfigError(
            f"{source}: field 'num_key_value_heads' = {kv_heads}; expected a divisor of "
            f"num_attention_heads = {heads}"
        )
    dtype = cfg.get("torch_dtype", cfg.get("dtype", "float32")) or "float32"
    shape = LlamaShape(
        vocab_size=_get(cfg, "vocab_size", source, int, positive=True),
        hidden_size=hidden,
        intermediate_size=_get(cfg, "intermediate_size", source, int, positive=True),
        num_hidden_layers=_get(cfg, "num_hidden_layers", source, int, positive=True),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(_get(cfg, "rms_norm_eps", source, (int, float), default=1e-6, positive=True)),
        max_position_embeddings=_get(cfg, "max_position_embeddings", source, int, default=2048, positive=True),
        tie_word_embeddings=_get(cfg, "tie_word_embeddings", source, bool, default=False),
        rope=_parse_rope(cfg, source),
        attention_bias=_get(cfg, "attention_bias", source, bool, default=False),
        mlp_bias=_get(cfg, "mlp_bias", source, bool, default=False),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_id=cfg.get("eos_token_id"),
        pad_token_id=cfg.get("pad_token_id"),
        torch_dtype=str(dtype),
    )
    for key, limit in LIMITS.items():
        if getattr(shape, key) > limit:
            raise ConfigError(f"{source}: field {key!r} = {getattr(shape, key)}; expected at most {limit}")
    if shape.param_count() > MAX_PARAMETERS:
        raise ConfigError(f"{source}: the config implies {shape.param_count()} parameters; expected at most "
                          f"{MAX_PARAMETERS}")
    return shape


def check_params_match_config(shapes: Mapping[str, Sequence[int]], shape: LlamaShape, where: str,
                              config_source: str) -> None:
    """Refuse parameters (name -> shape, of a commit's learned-state entries) that are not exactly the
    config's: an extra entry would be dropped silently on loading, a missing one fail later, a wrong shape
    contradict the config an export writes beside it."""
    expected = shape.parameter_shapes()
    have = {name: tuple(dims) for name, dims in shapes.items()}
    missing, extra = sorted(expected.keys() - have.keys()), sorted(have.keys() - expected.keys())
    wrong = sorted(n for n in expected.keys() & have.keys() if have[n] != expected[n])
    if missing or extra or wrong:
        wrong_text = f"; {wrong[0]} has shape {list(have[wrong[0]])} but {list(expected[wrong[0]])} expected " \
                     f"({len(wrong)} wrong)" if wrong else ""
        raise ConfigError(f"{where}: parameters do not match {config_source}: missing {missing[:5]} "
                          f"({len(missing)}), unexpected {extra[:5]} ({len(extra)}){wrong_text}")


def load_config(path: str | os.PathLike) -> LlamaShape:
    """Load `config.json` (or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise ConfigError(f"{path}: config.json not found")
    return parse_config(load_json_strict(path), str(path))


# --- shape presets ---------------------------------------------------------------------------------
def smollm2_17b() -> LlamaShape:
    """SmolLM2-1.7B's shape (its config.json): the full-scale shape of the benchmarks and GPU campaigns."""
    return LlamaShape(vocab_size=49152, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=32, head_dim=64, rms_norm_eps=1e-5,
                      max_position_embeddings=8192, tie_word_embeddings=True, rope=RopeSpec(theta=130000.0))


def toy_shape(vocab_size: int = 256, num_hidden_layers: int = 4, max_position_embeddings: int = 256) -> LlamaShape:
    """A shape of SmolLM2's kind small enough for a CPU, with which a benchmark or campaign checks its own
    script (`--tiny`, `--scale tiny`); the vocabulary is a parameter so that a real tokenizer's ids fit."""
    return LlamaShape(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=num_hidden_layers, num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                      rms_norm_eps=1e-5, max_position_embeddings=max_position_embeddings, tie_word_embeddings=True,
                      rope=RopeSpec(theta=130000.0))
