"""Does the kit's training path form an induction (copy) circuit on one GPU, under each compute setting?

Random token sequences, each followed by a copy of itself, packed into rows; after a few hundred
updates the NLL of the copied half falls to near zero when induction forms, and stays at ln(V) when
it does not. Run per setting (fp32 eager, bf16 + FLASH, compiled, on-device clip), with the kit's
engine (build_worker) and, as the plain baseline, the same model under torch.optim.AdamW.
Prints one JSON line per setting; `--out FILE` also writes them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import numpy as np
import torch

from kit import numerics
from kit.distributed.group import Group
from kit.distributed.pipeline import EngineConfig
from kit.engine.worker import build_worker
from kit.model.config import LlamaShape, RopeSpec
from kit.model.llama import LlamaCausalLM, init_weights
from kit.model.shard import even_layout
from kit.train.batch import TrainRecord
from kit.train.optim import GroupConfig


def rows(rng, n, T, V, seg):
    out = []
    for _ in range(n):
        r = []
        while len(r) < T:
            s = list(rng.integers(10, V, seg))
            r += s + [3] + s + [2]
        out.append(r[:T])
    return out


def copy_nll(model, data, seg, dtype):
    ids = torch.tensor(data, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        lp = torch.log_softmax(model(ids).float()[:, :-1], -1)
    nll = -lp.gather(2, ids[:, 1:, None]).squeeze(-1)  # nll[:, i] predicts token i + 1
    first = nll[:, 1:seg - 1].mean().item()
    second = nll[:, seg + 1:2 * seg].mean().item()
    return first, second


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out")
    a = ap.parse_args()
    numerics.apply(torch.device("cuda"), deterministic_gpu=True)
    V, T, seg = 16384, 1024, 64
    shape = LlamaShape(vocab_size=V, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                       num_attention_heads=12, num_key_value_heads=12, head_dim=64, rms_norm_eps=1e-5,
                       max_position_embeddings=2048, tie_word_embeddings=True, rope=RopeSpec("default", 10000.0),
                       bos_token_id=1, eos_token_id=2, pad_token_id=0, torch_dtype="float32")
    settings = [("plain-adamw-bf16", "bfloat16", "off", "off"), ("engine-fp32-eager", "float32", "off", "off"),
                ("engine-bf16-eager-flash", "bfloat16", "off", "off"),
                ("engine-bf16-compiled-flash", "bfloat16", "auto", "off"),
                ("engine-bf16-compiled-flash-deviceclip", "bfloat16", "auto", "auto")]
    results = []
    for name, dtype, comp, clip in settings:
        try:
            r = run_setting(a, shape, name, dtype, comp, clip, V, T, seg)
        except Exception as e:  # noqa: BLE001 (a setting that cannot run is a result too)
            r = {"setting": name, "error": f"{type(e).__name__}: {e}"[:500]}
        print(json.dumps(r), flush=True)
        results.append(r)
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


def run_setting(a, shape, name, dtype, comp, clip, V, T, seg):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if True:
        rng = np.random.default_rng(0)
        test = rows(np.random.default_rng(1), 16, T, V, seg)
        model = LlamaCausalLM(shape)
        init_weights(model, 0, 0.02)
        model.cuda()
        t0 = time.perf_counter()
        curve = []
        if name.startswith("plain"):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
        else:
            eng = build_worker(Group(0, 1, torch.device("cuda")), even_layout(12, 1), None,
                               EngineConfig(16, 1.0, compute_dtype=dtype, pad_id=0, compile_blocks=comp, length_bucket=0,
                                            clip_on_device=clip),
                               {"default": GroupConfig(1e-3, 0.9, 0.95, 1e-8, 0.0)}, student=model).engine
        for k in range(a.steps):
            data = rows(rng, 32, T, V, seg)
            if name.startswith("plain"):
                ids = torch.tensor(data, device="cuda")
                with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    logits = model(ids)
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, V), ids[:, 1:].reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            else:
                recs = [TrainRecord(f"r{k}-{i}", tuple(int(x) for x in r), (False,) + (True,) * (T - 1))
                        for i, r in enumerate(data)]
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]) if dtype != "float32" else contextlib.nullcontext():
                    eng.update(recs)
            if (k + 1) % 50 == 0:
                curve.append((k + 1, *copy_nll(model, test, seg, getattr(torch, dtype))))
        torch.cuda.synchronize()
        r = {"setting": name, "steps": a.steps, "seconds": round(time.perf_counter() - t0, 1),
             "curve_first_half_vs_copy_nll": [[s, round(f, 3), round(c, 3)] for s, f, c in curve]}
        return r


if __name__ == "__main__":
    main()
