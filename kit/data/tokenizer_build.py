"""Build the real Hugging Face tokenizer directory of the kit's tiny seed.

The tiny seed must look like any local Hugging Face seed: `AutoTokenizer` loads it offline as a
fast tokenizer and `apply_chat_template` renders ChatML like SmolLM2's. So it is a byte-level BPE
trained with `tokenizers`. The decision to know: no normalizer, so offsets map 1:1 to the text
(the assistant mask in `kit.data.chat` depends on it), and two builds give byte-identical files.
Choices: the notes below.

Notes: the choices, and why.

- A 256-symbol byte-level base: every UTF-8 string encodes, so no unknown token exists and decode(encode(t)) == t.
- Digits split one by one before the byte-level split (as SmolLM2): arithmetic sees one token per digit.
- The special tokens take ids 0, 1, 2 in SmolLM2's order, so ids in configs are predictable.
- Sorted keys, fixed formatting and deterministic BPE training: two builds give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from kit.digest import write_bytes_atomic

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Order fixes the ids: <|endoftext|> = 0, <|im_start|> = 1, <|im_end|> = 2 (as in SmolLM2).
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END)
SPECIAL_TOKEN_IDS: dict[str, int] = {token: index for index, token in enumerate(SPECIAL_TOKENS)}

BOS_TOKEN = IM_START  # as SmolLM2-Instruct; never added automatically (the template writes it)
EOS_TOKEN = IM_END  # generation stops at the end of the assistant turn
PAD_TOKEN = ENDOFTEXT

BYTE_ALPHABET_SIZE = 256
MIN_VOCAB_SIZE = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
DEFAULT_MODEL_MAX_LENGTH = 2048

# ChatML exactly as SmolLM2 renders it, minus SmolLM2's default system prompt: each message is
# "<|im_start|>{role}\n{content}<|im_end|>\n"; a generation prompt opens an assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"


def _untrained_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = None
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    # trim_offsets=False: a token's offsets cover its leading space too, so the offsets of
    # consecutive tokens tile the text without gaps (the chat mask relies on it).
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train the byte-level BPE on `texts`; special tokens get ids 0..2."""
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size={vocab_size!r}: expected an int >= {MIN_VOCAB_SIZE} "
            f"({BYTE_ALPHABET_SIZE} byte symbols + {len(SPECIAL_TOKENS)} special tokens)"
        )
    tokenizer = _untrained_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def checked_texts():
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"tokenizer training text {index}: expected str, got {type(text).__name__}")
            yield text

    tokenizer.train_from_iterator(checked_texts(), trainer)
    for token, expected_id in SPECIAL_TOKEN_IDS.items():
        assert tokenizer.token_to_id(token) == expected_id, (token, tokenizer.token_to_id(token))
    return tokenizer


def tokenizer_config(model_max_length: int = DEFAULT_MODEL_MAX_LENGTH) -> dict:
    """The `tokenizer_config.json` of the built tokenizer (ChatML template, special tokens)."""
    added_tokens_decoder = {
        str(token_id): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token, token_id in SPECIAL_TOKEN_IDS.items()
    }
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": added_tokens_decoder,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": BOS_TOKEN,
        "chat_template": CHAT_TEMPLATE,
        # No cleanup: decode must give back the exact text (" ." stays " .").
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "model_max_length": model_max_length,
        "pad_token": PAD_TOKEN,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def special_tokens_map() -> dict:
    return {
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
    }


def _json_bytes(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def build_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    out_dir: Path,
    *,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
) -> None:
    """Train on `texts` and write a standard HF tokenizer directory into `out_dir`.

    The directory may already hold other seed files (config.json, weights); the three tokenizer
    files are written atomically and replace earlier ones.
    """
    if not isinstance(model_max_length, int) or model_max_length <= 0:
        raise ValueError(f"model_max_length={model_max_length!r}: expected a positive int")
    out_dir = Path(out_dir)
    tokenizer = train_tokenizer(texts, vocab_size)
    if tokenizer.get_vocab_size() < MIN_VOCAB_SIZE:
        raise ValueError(f"{out_dir}: trained vocabulary has {tokenizer.get_vocab_size()} tokens, expected "
                         f">= {MIN_VOCAB_SIZE}")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out_dir / TOKENIZER_FILE, (tokenizer.to_str(pretty=True) + "\n").encode("utf-8"))
    write_bytes_atomic(out_dir / TOKENIZER_CONFIG_FILE, _json_bytes(tokenizer_config(model_max_length)))
    write_bytes_atomic(out_dir / SPECIAL_TOKENS_MAP_FILE, _json_bytes(special_tokens_map()))
