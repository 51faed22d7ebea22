#!/usr/bin/env python3
"""Write a tiny LlamaForCausalLM folder for a real SGLang server on the CPU (tests only).

    python3 scripts/make_tiny_model.py OUT_DIR [--hidden 64] [--layers 2] [--heads 4]
                                               [--kv-heads N] [--vocab 1000]
                                               [--intermediate N] [--max-position 2048]

The folder holds no weights: launch SGLang with ``--load-format dummy`` and it fills random
ones. It holds:

- ``config.json``: LlamaForCausalLM, bfloat16, head_dim = hidden / heads;
- ``generation_config.json``;
- ``tokenizer.json``: a word-level tokenizer (lower-cases, splits on whitespace and
  punctuation; no BOS/EOS added), written directly as JSON with the standard library only,
  so any Python 3.10+ runs this script (the app's venv has no ``tokenizers``);
- ``tokenizer_config.json`` with a chat template, ``special_tokens_map.json``.

One prompt word is one token: the vocabulary holds the special tokens, the words of
``WORDS`` below (the project's test prompts are made of them), a few punctuation marks and
chat roles, then filler words ``w0001 w0002 ...`` up to ``--vocab``. An unknown word maps to
``[UNK]`` (still one token). With random weights the output is random vocabulary words.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIAL_TOKENS = ["[UNK]", "<s>", "</s>", "<pad>"]
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3

# Every word of the project's test prompts: one word, one token.
WORDS = [
    "engram", "rows", "live", "in", "host", "memory", "and", "the", "gpu", "reads", "table",
    "sits", "while", "kv", "cache", "grows", "on", "each", "tokens", "stream", "out",
]
PUNCTUATION = [".", ",", "?", "!", ":", ";", "-", "'"]
CHAT_ROLES = ["system", "user", "assistant"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }} : {{ message['content'] }} . "
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def build_vocab(size: int) -> dict[str, int]:
    fixed: list[str] = []
    for word in [*SPECIAL_TOKENS, *WORDS, *PUNCTUATION, *CHAT_ROLES]:
        if word not in fixed:
            fixed.append(word)
    if size < len(fixed):
        raise SystemExit(f"--vocab {size} is too small: {len(fixed)} fixed tokens need room")
    vocab = {tok: i for i, tok in enumerate(fixed)}
    width = max(4, len(str(size)))
    n = 1
    while len(vocab) < size:
        vocab[f"w{n:0{width}d}"] = len(vocab)
        n += 1
    return vocab


def tokenizer_json(vocab: dict[str, int]) -> dict:
    """The serialised form of a `tokenizers` WordLevel tokenizer (format 1.0)."""
    added = [
        {
            "id": vocab[tok],
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for tok in SPECIAL_TOKENS
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Lowercase"},
        # Whitespace: splits on \w+|[^\w\s]+, so "memory." is two tokens "memory" ".".
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,  # no BOS/EOS added: prompt tokens == prompt words
        # WordPiece's decoder joins tokens with single spaces (no "##" token exists here);
        # a tokenizer with no decoder decodes the same, but xgrammar warns at start-up.
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }


def tokenizer_config(max_len: int) -> dict:
    decoder = {
        str(i): {
            "content": tok,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, tok in enumerate(SPECIAL_TOKENS)
    }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": decoder,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "[UNK]",
        "pad_token": "<pad>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "chat_template": CHAT_TEMPLATE,
    }


def model_config(args: argparse.Namespace) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": args.hidden,
        "intermediate_size": args.intermediate or 4 * args.hidden,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads or args.heads,
        "head_dim": args.hidden // args.heads,
        "vocab_size": args.vocab,
        "max_position_embeddings": args.max_position,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "use_cache": True,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path, help="folder to write (created; files overwritten)")
    p.add_argument("--hidden", type=int, default=64, help="hidden size (default 64)")
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--kv-heads", type=int, default=0, help="KV heads (default: = heads)")
    p.add_argument("--intermediate", type=int, default=0, help="MLP size (default 4*hidden)")
    p.add_argument("--vocab", type=int, default=1000, help="vocabulary size (default 1000)")
    p.add_argument("--max-position", type=int, default=2048,
                   help="max_position_embeddings = context length (default 2048, >= 512)")
    args = p.parse_args(argv)
    if args.hidden % args.heads:
        p.error("--hidden must be a multiple of --heads")
    kv = args.kv_heads or args.heads
    if args.heads % kv:
        p.error("--heads must be a multiple of --kv-heads")
    if args.max_position < 512:
        p.error("--max-position must be at least 512")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    vocab = build_vocab(args.vocab)
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": model_config(args),
        "generation_config.json": {
            "bos_token_id": BOS_ID,
            "eos_token_id": EOS_ID,
            "pad_token_id": PAD_ID,
        },
        "tokenizer.json": tokenizer_json(vocab),
        "tokenizer_config.json": tokenizer_config(args.max_position),
        "special_tokens_map.json": {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "[UNK]",
            "pad_token": "<pad>",
        },
    }
    for name, body in files.items():
        (out / name).write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote a tiny LlamaForCausalLM to {out} (hidden {args.hidden}, layers {args.layers}, "
          f"heads {args.heads}, vocab {args.vocab}, max positions {args.max_position}); "
          "launch SGLang with --load-format dummy", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
