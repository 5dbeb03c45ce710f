"""Byte-level BPE tokenizers trained on shards, saved in Hugging Face format.

``<MASK>`` and every entity token seen in the training text (``Person_[...]``, the
redaction stage's ``encrypt`` operator) are single special tokens, so loss masks and
attacks find them by id. ``<|endoftext|>`` separates documents in packed blocks.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Iterable

from privatize.ciphers.entity import TOKEN_RE
from privatize.ciphers.tokens import MASK_TOKEN
from privatize.errors import SpecError

EOS = "<|endoftext|>"
PAD = "<pad>"
BASE_SPECIALS = [EOS, PAD, MASK_TOKEN]


def entity_tokens(texts: Iterable[str], limit: int) -> list[str]:
    """The ``limit`` most frequent entity tokens in ``texts`` (ties by first seen)."""
    counts: Counter[str] = Counter()
    for t in texts:
        if "_[" in t:
            counts.update(m.group(0) for m in TOKEN_RE.finditer(t))
    return [tok for tok, _ in counts.most_common(limit)]


def train_tokenizer(texts: list[str], vocab_size: int, min_frequency: int = 2, max_entity_tokens: int = 4096):
    """A ``PreTrainedTokenizerFast`` (byte-level BPE) trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if not texts:
        raise SpecError("tokenizer: no training text (the data has no records)")
    specials = BASE_SPECIALS + entity_tokens(texts, max_entity_tokens)
    tok = Tokenizer(models.BPE())
    # Digits one by one (as Llama does): every number of n digits is n tokens, so all
    # candidates of a canary ("My ID is: 123456") have the same length and exposure can
    # rank them by total log-likelihood, sharing prefixes in a trie (attacks/exposure.py).
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=max(vocab_size, len(specials) + 300), min_frequency=min_frequency,
                                  special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=PAD,
                                   mask_token=MASK_TOKEN, additional_special_tokens=specials[3:],
                                   clean_up_tokenization_spaces=False)


def load_tokenizer(path: str, what: str = "tokenizer.path"):
    from transformers import AutoTokenizer

    p = Path(path)
    if not (p / "tokenizer.json").is_file():
        raise SpecError(f"{what}: {path} has no tokenizer.json (not a Hugging Face fast tokenizer folder)")
    tok = AutoTokenizer.from_pretrained(p)
    if tok.eos_token is None:
        tok.eos_token = EOS if EOS in tok.get_vocab() else tok.convert_ids_to_tokens(0)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def fingerprint(tok) -> str:
    """SHA-256 of the tokenizer's vocabulary and merges (what makes ids mean the same)."""
    return hashlib.sha256(tok.backend_tokenizer.to_str().encode()).hexdigest()


def special_ids(tok) -> dict:
    return dict(bos_token_id=tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def tokens_per_char(tok, texts: list[str]) -> float:
    chars = sum(len(t) for t in texts)
    n = sum(len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"])
    return n / max(1, chars)
