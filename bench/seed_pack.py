"""The small seed's encode-and-pack step, the kit's against the code it replaced, side by side in one process.

    PYTHONPATH=. python3 bench/seed_pack.py --out OUT [--config campaigns/seed-probes/pN.json] [--repeats 2]

The seed build (`kit seed build --scale small`) spent 74 s of a 354 s build on encoding its conversations
and packing them into rows (runs/seed-rebuilds-2026-12-01, `seconds.encode_and_pack`), on the GPU host's
CPU while the GPU waited. This bench reads the build's inputs and trains its tokenizer once, as the build
does, then packs them with `reference_pack` (kit/seed/small.py `_pack` and kit/data/chat.py
`encode_single_turns` as they were at 5c22c05, copied below) and with the kit's `_pack` under
`collection_paused`, alternating, `--repeats` times each. Both outputs are reduced to one sha256 over every
row's ids, target mask and id, the conversation order and the skipped ids, and must be equal: the packed
rows decide the seed's parameter digest. Writes OUT/<run-id>/run.json (kit-bench/1) and prints its results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from kit.data import general_text
from kit.data.chat import EncodedExample, _render, encode_or_refuse
from kit.data.retrieval import retrieval_documents
from kit.evidence.environment import code_state, device_info, versions
from kit.seed import small
from kit.train.batch import TrainRecord

REPO = Path(__file__).resolve().parents[1]


# --- the reference: the code the kit ran before, verbatim but for names ----------------------------------
def reference_encode_single_turns(tokenizer, conversations, max_tokens: int, check: int = 64):
    user, reply = "\ue000", "\ue001"
    probe = _render(tokenizer, [{"role": "user", "content": user}, {"role": "assistant", "content": reply}])
    slow = [encode_or_refuse(tokenizer, c, max_tokens) for c in conversations[:check]]
    if probe.count(user) == 1 and probe.count(reply) == 1 and probe.index(user) < probe.index(reply):
        head, rest = probe.split(user)
        middle, tail = rest.split(reply)
        texts = [head + c.messages[0].content + middle + c.messages[1].content + tail for c in conversations]
        starts = [len(head) + len(c.messages[0].content) + len(middle) for c in conversations]
        enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
        fast = []
        for c, text, start, ids, offsets in zip(conversations, texts, starts, enc["input_ids"],
                                                enc["offset_mapping"]):
            end = len(text.rstrip())
            mask = [e > s and s < end and e > start for s, e in offsets]
            if mask:
                mask[0] = False
            if len(ids) > max_tokens or not any(mask):
                fast.append(None)
                continue
            fast.append(EncodedExample(id=c.id, input_ids=tuple(int(i) for i in ids),
                                       target_mask=tuple(mask), source=c.source,
                                       conversation_digest=c.digest, truncated=False))
        if fast[:check] == slow:
            return fast
    return slow + [encode_or_refuse(tokenizer, c, max_tokens) for c in conversations[check:]]


def reference_text_rows(ids_per_doc, order, sep: int, seq_len: int):
    stream = []
    for i in order:
        stream += ids_per_doc[i] + [sep]
    return [stream[a:a + seq_len] for a in range(0, len(stream) - seq_len + 1, seq_len)]


def reference_conversation_rows(encoded, order, pad: int, seq_len: int):
    rows, ids, mask = [], [], []
    for i in order:
        e = encoded[i]
        if len(ids) + len(e.input_ids) > seq_len:
            rows.append((ids + [pad] * (seq_len - len(ids)), mask + [False] * (seq_len - len(mask))))
            ids, mask = [], []
        ids, mask = ids + list(e.input_ids), mask + [bool(m) for m in e.target_mask]
    if ids:
        rows.append((ids + [pad] * (seq_len - len(ids)), mask + [False] * (seq_len - len(mask))))
    return rows


def reference_encode_conversations(cfg, tokenizer, convs):
    single = [i for i, c in enumerate(convs) if [m.role for m in c.messages] == ["user", "assistant"]]
    encoded = [None] * len(convs)
    for i, e in zip(single, reference_encode_single_turns(tokenizer, [convs[i] for i in single], cfg.seq_len)):
        encoded[i] = e
    for i in sorted(set(range(len(convs))) - set(single)):
        encoded[i] = encode_or_refuse(tokenizer, convs[i], cfg.seq_len)
    return encoded


def reference_pack(cfg, tokenizer, pad: int, inputs):
    doc_ids = tokenizer([d["text"] for d in inputs.docs_train], add_special_tokens=False)["input_ids"]
    encoded = reference_encode_conversations(cfg, tokenizer, inputs.convs)
    skipped = [c.id for c, e in zip(inputs.convs, encoded) if e is None]
    kept = [i for i, e in enumerate(encoded) if e is not None]
    rng = np.random.default_rng(cfg.seed)
    rows = []
    for _epoch in range(cfg.general_text_epochs):
        rows += [(r, [True] * len(r)) for r in reference_text_rows(doc_ids, list(rng.permutation(len(doc_ids))), pad,
                                                                    cfg.seq_len)]
    retrieval = retrieval_documents(cfg.retrieval_docs, cfg.seed, cfg.retrieval_max_pairs)
    retrieval_ids = tokenizer(retrieval, add_special_tokens=False)["input_ids"] if retrieval else []
    rows += [(r, [True] * len(r)) for r in reference_text_rows(retrieval_ids, list(range(len(retrieval_ids))), pad,
                                                                cfg.seq_len)]
    alpaca_idx = [i for i in kept if i < len(inputs.alpaca_train)]
    once_idx = [i for i in kept if i >= len(inputs.alpaca_train)]
    first_task = len(inputs.convs) - len(inputs.tasks)
    task_idx = [i for i in once_idx if first_task <= i < first_task + cfg.tasks]
    pool = alpaca_idx * cfg.alpaca_epochs + once_idx + task_idx * (cfg.task_epochs - 1)
    conv_order = [pool[int(j)] for j in rng.permutation(len(pool))]
    rows += reference_conversation_rows(encoded, conv_order, pad, cfg.seq_len)
    row_order = rng.permutation(len(rows))
    records = [TrainRecord(f"row{int(j)}", tuple(rows[j][0]), tuple(rows[j][1])) for j in row_order]
    updates = len(records) // cfg.batch_rows
    if cfg.max_updates:
        updates = min(updates, cfg.max_updates)
    return records[:updates * cfg.batch_rows], conv_order, skipped


# --- the comparison ----------------------------------------------------------------------------------------
def packed_digest(rows, conv_order, skipped) -> str:
    """sha256 over every row (id, ids as int32, mask as bytes) in order, then the conversation order and the
    skipped ids: equal digests mean the training rows the seed is built from are equal."""
    h = hashlib.sha256()
    for r in rows:
        h.update(r.id.encode() + b"\0")
        h.update(np.asarray(r.input_ids, dtype=np.int32).tobytes())
        h.update(np.asarray(r.target_mask, dtype=np.bool_).tobytes())
    h.update(np.asarray(conv_order, dtype=np.int64).tobytes())
    h.update(json.dumps(skipped).encode())
    return h.hexdigest()


def kit_pack(cfg, tokenizer, pad: int, inputs):
    with small.collection_paused():
        p = small._pack(cfg, tokenizer, pad, inputs)
    return p.rows, p.conv_order, p.skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="a SmallSeedConfig JSON (campaigns/seed-probes/*.json); default: the defaults")
    ap.add_argument("--repeats", type=int, default=2, help="packs of each implementation, alternating")
    ap.add_argument("--out", required=True)
    ap.add_argument("--run-id", default=None)
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats {a.repeats}: expected at least 1")
    cfg = small.SmallSeedConfig.from_json(a.config) if a.config else small.SmallSeedConfig.small()
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    inputs = small._read_inputs(cfg, REPO / small.ALPACA_FILE, REPO / general_text.TEXT_FILE, REPO / "contracts")
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as staging:
        tokenizer, ids = small._train_tokenizer(cfg, inputs, Path(staging))
    t2 = time.perf_counter()
    pad = ids[small.PAD_TOKEN]
    runs = {"reference": [], "kit": []}
    digests = {"reference": set(), "kit": set()}
    counts = {}
    for _ in range(a.repeats):
        for name, pack in (("reference", reference_pack), ("kit", kit_pack)):
            gc.collect()
            t = time.perf_counter()
            rows, order, skipped = pack(cfg, tokenizer, pad, inputs)
            runs[name].append(round(time.perf_counter() - t, 2))
            digests[name].add(packed_digest(rows, order, skipped))
            counts[name] = {"rows": len(rows), "conversations_packed": len(order), "skipped": len(skipped)}
            del rows, order, skipped
            print(json.dumps({name: runs[name][-1]}), flush=True)
    identical = len(digests["reference"]) == 1 and digests["reference"] == digests["kit"]
    best = {k: min(v) for k, v in runs.items()}
    run_id = a.run_id or f"bench-seed-pack-{started.strftime('%Y-%m-%d')}"
    run_dir = Path(a.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    import torch

    record = {
        "format": "kit-bench/1", "run_id": run_id, "notebook": "(benchmark script)",
        "command": " ".join(["python", "bench/seed_pack.py", *(sys.argv[1:] if argv is None else argv)]),
        "git": code_state(),
        "versions": versions(runtime=True),
        "parameters": {"config": a.config, "repeats": a.repeats, "tasks": cfg.tasks, "task_epochs": cfg.task_epochs,
                       "seq_len": cfg.seq_len, "batch_rows": cfg.batch_rows,
                       "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()},
        "status": "completed" if identical else "failed",
        "started_at": started.isoformat(timespec="seconds"),
        "ended_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": device_info(torch.device("cpu")),
        "results": {"identical": identical, "packed_sha256": sorted(digests["reference"] | digests["kit"]),
                    "counts": counts, "seconds": runs, "best_seconds": best,
                    "kit_over_reference": round(best["kit"] / best["reference"], 4),
                    "inputs_seconds": round(t1 - t0, 2), "tokenizer_seconds": round(t2 - t1, 2)},
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"run_dir": str(run_dir), **record["results"]}))
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
