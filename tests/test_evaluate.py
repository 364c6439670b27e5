"""Evaluation: batched greedy decoding equals the one-prompt decoder; NLL equals a direct computation."""

import torch
import torch.nn.functional as F
from support.models import write_hf_llama

from kit.evaluation.scoring import load_model
from kit.model.generate import greedy_batch, greedy_generate


def test_batched_greedy_equals_single(tmp_path):
    model = load_model(seed_dir=str(write_hf_llama(tmp_path / "m", layers=2)))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (3, 9, 5, 1)]
    batch = greedy_batch(model, prompts, 12, eos_id=7)
    for p, b in zip(prompts, batch, strict=True):
        assert b == greedy_generate(model, p, 12, 7)


def test_nll_matches_direct_log_softmax(tmp_path):
    from kit.data.chat import encode_conversation, load_tokenizer
    from kit.data.conversations import Conversation, Message
    from kit.data.tokenizer_build import build_tokenizer
    from kit.evaluation.scoring import score_nll

    tok_dir = tmp_path / "m"
    write_hf_llama(tok_dir, layers=2, vocab=300)
    texts = ["hello there", "the sky is blue", "two plus two is four"] * 20
    build_tokenizer(texts, 300, tok_dir)
    tok = load_tokenizer(tok_dir)
    model = load_model(seed_dir=str(tok_dir))
    convs = [Conversation(f"c{i}", (Message("user", t), Message("assistant", t[::-1])), "test")
             for i, t in enumerate(texts[:5])]
    rows = score_nll(model, tok, convs, 128, batch_size=2)
    for c, r in zip(convs, rows, strict=True):
        e = encode_conversation(tok, c, 128)
        ids = torch.tensor(e.input_ids)[None]
        with torch.no_grad():
            logp = F.log_softmax(model(ids)[0].float(), -1)
        pos = [t for t in range(1, len(e.input_ids)) if e.target_mask[t]]
        direct = -sum(float(logp[t - 1, e.input_ids[t]]) for t in pos)
        assert r["tokens"] == len(pos) > 0
        assert abs(r["nll_sum"] - direct) < 1e-4
