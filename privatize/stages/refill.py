"""``refill``: put a plausible word back into each ``<MASK>`` with a masked language model
(paper 002, SEEDS.md section 4), so a model trained on the corpus pays less perplexity
for the holes.

The filler is any local Hugging Face masked-LM folder (``AutoModelForMaskedLM`` and its
tokenizer): one trained with ``privatize train`` kind ``mlm`` (a tiny BERT on WikiText-2,
or fine-tuned on the masked corpus itself, the paper's FT variant), or a downloaded
BERT/RoBERTa. Masks are filled left to right, one at a time, each fill conditioning the
next (the paper's order); a mask gets ``tokens_per_mask`` tokens (1, the paper's choice,
by default), each predicted from a window of ``max_length`` tokens around it.

Candidates are whole words (letters and digits, no punctuation or special tokens) that
fit the gap: after a space, a token that starts a word. ``strategy``:

* ``top1``: the most likely candidate;
* ``topk``: one of the ``k`` (10) most likely, drawn uniformly, preferring candidates
  outside the allow list (``word_list`` or wordfreq's ``allow_list_size`` most frequent
  English words, as the ``mask`` stage's ``allow_list``) so a refill does not put a
  masked rare word back; only when all ``k`` are on the list is one of them drawn.

``forbid_original`` (on by default): a fill is never a word the mask hid at that
position (the ``mask`` stage hands the hidden words over in an internal column that is
never written). The draw is seeded per record from ``seed`` and the masked text, so the
output does not depend on batch size, worker count or runner.

Columns added: ``refill_spans`` (``list<struct<start, end>>``, the filled character
ranges in the new text). Statistics: ``masks_filled``, ``top_choice_original`` (the
model's first choice was the hidden word: a leakage signal; counted where the hidden
word is known), ``fills_on_allow_list`` and ``original_known``. A heavy-setup stage: on
Ray an actor pool, batched, on a GPU when ``device`` allows and one is there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from privatize.ciphers.tokens import MASK_TOKEN
from privatize.errors import SpecError
from privatize.policy import ServerPath
from privatize.refs import MODEL_REF, model_folder
from privatize.settings import AfterOneOf, Before, StageSettings
from privatize.stage import QUARANTINE, Stage, register_stage, set_column
from privatize.stages.mask import ORIGINALS, SPANS_TYPE, WORD, load_words

log = logging.getLogger(__name__)

NO_TEXT = "no text to refill"




class RefillSettings(StageSettings):
    kind: Literal["refill"] = "refill"
    order_rules = (
        AfterOneOf("mask", "refill fills the masks of a mask stage: put a mask stage before it"),
        Before("encrypt_text", "refill after encrypt_text sees only ciphertext; put it before the cipher"),
    )
    checkpoint: Annotated[str, ServerPath(
        why="not taken by the service: it names a file on the server (the filler is training:<id>, one of your "
            "succeeded trainings of kind mlm)", model_ref=True)]
    """A local Hugging Face masked-LM folder (``config.json``, weights, tokenizer); through
    the service, ``training:<id>``: the model of one of the tenant's succeeded ``mlm``
    trainings, which the workers fetch from the run's :data:`privatize.refs.MODELS_ENV` (locations, set
    by the service)."""
    strategy: Literal["top1", "topk"] = "topk"
    k: int = Field(10, ge=1, le=1000)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    forbid_original: bool = True
    word_list: Annotated[str | None, ServerPath()] = None
    """``topk``'s allow list (a file, one word per line) instead of wordfreq's."""
    allow_list_size: int = Field(5_000, ge=1, le=1_000_000)
    tokens_per_mask: int = Field(1, ge=1, le=8)
    max_length: int = Field(128, ge=8, le=4096)
    batch_size: int = Field(64, ge=1, le=4096)
    """Windows per forward pass."""
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @model_validator(mode="after")
    def _check(self) -> "RefillSettings":
        if self.checkpoint.startswith("training:"):
            if not MODEL_REF.fullmatch(self.checkpoint):
                raise ValueError(f"checkpoint {self.checkpoint!r}: a training reference is training:<16 hex digits>")
            return self._check_lists()  # the service checks the training itself
        config = os.path.join(self.checkpoint, "config.json")
        if not os.path.isfile(config):
            raise ValueError(f"checkpoint {self.checkpoint!r} is not a Hugging Face model folder (no config.json)")
        try:
            with open(config, encoding="utf-8") as fh:
                arch = json.load(fh).get("architectures") or []
        except (OSError, ValueError):
            raise ValueError(f"checkpoint {self.checkpoint!r}: config.json is not readable JSON") from None
        if arch and not any(a.endswith("ForMaskedLM") for a in arch):
            raise ValueError(f"checkpoint {self.checkpoint!r} is a {arch[0]}, not a masked language model")
        return self._check_lists()

    def _check_lists(self) -> "RefillSettings":
        if self.word_list and not os.path.isfile(self.word_list):
            raise ValueError(f"word_list {self.word_list!r} is not a file")
        # by value: a stored spec (every field written) must parse again
        if self.strategy == "top1" and (self.k != 10 or self.word_list):
            raise ValueError("k and word_list are settings of strategy topk")
        return self


class Vocabulary:
    """What each token id can be as a fill: a whole word (``word``, lower case, or None),
    whether it starts a new word (a leading space in byte-level BPE or SentencePiece, not a
    ``##`` piece in WordPiece), and whether it is on the allow list."""

    def __init__(self, tok, allow: frozenset[str]):
        ids = range(len(tok))
        pieces = tok.convert_ids_to_tokens(list(ids))
        if any(p.startswith("Ġ") for p in pieces):
            self.style = "bytelevel"
        elif any(p.startswith("▁") for p in pieces):
            self.style = "sentencepiece"
        else:
            self.style = "wordpiece"
        special = set(tok.all_special_ids)
        self.starts = np.zeros(len(pieces), bool)
        self.ok = np.zeros(len(pieces), bool)
        self.allowed = np.zeros(len(pieces), bool)
        self.text: list[str] = []
        for i, p in enumerate(pieces):
            if self.style == "bytelevel":
                s = tok.decode([i])
                starts, w = s.startswith(" "), s[1:] if s.startswith(" ") else s
            elif self.style == "sentencepiece":
                starts, w = p.startswith("▁"), p.lstrip("▁")
            else:
                starts, w = not p.startswith("##"), p
            self.text.append(w)
            self.starts[i] = starts
            if i not in special and w and WORD.fullmatch(w):
                self.ok[i] = True
                self.allowed[i] = w.lower() in allow
        self.lower = [w.lower() for w in self.text]

    @property
    def strips_space(self) -> bool:
        """Whether a space before a gap belongs to the fill's token (not WordPiece)."""
        return self.style != "wordpiece"

    def candidates(self) -> np.ndarray:
        """Ids that can fill a slot: whole words that start a word (in byte-level BPE and
        SentencePiece the tokens with the leading space: a fill at the start of a line
        or after "(" is written without it). A token without the space may be a piece
        of a word ("ing"), which no gap wants."""
        return self.ok & self.starts


@register_stage("refill", RefillSettings)
class Refill(Stage):
    heavy_setup = True  # a transformer on every worker: an actor pool on Ray

    _model = None

    def setup(self) -> None:
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        st = self.settings
        folder = model_folder(st.checkpoint)
        self._tok = AutoTokenizer.from_pretrained(folder)
        if self._tok.mask_token_id is None:
            raise ValueError(f"refill: the tokenizer of {st.checkpoint} has no mask token")
        dev = st.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        self._device = torch.device(dev)
        self._model = AutoModelForMaskedLM.from_pretrained(folder).to(self._device).eval()
        if not type(self._model).__name__.endswith("ForMaskedLM"):
            raise SpecError(f"refill.checkpoint: {st.checkpoint} is a {type(self._model).__name__}, not a masked LM")
        limit = getattr(self._model.config, "max_position_embeddings", st.max_length)
        self._around = special_around(self._tok)
        self._width = min(st.max_length, limit) - len(self._around[0]) - len(self._around[1])
        allow = load_words(st.word_list, st.allow_list_size) if st.strategy == "topk" else frozenset()
        self._vocab = Vocabulary(self._tok, allow)
        log.info("refill: %s filler %s (%d tokens, %s), %s on %s", st.strategy, st.checkpoint, len(self._tok),
                 self._vocab.style, "forbidding originals" if st.forbid_original else "originals allowed", dev)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for k in ("_model", "_tok", "_vocab", "_device", "_around"):  # rebuilt by setup()
            state.pop(k, None)
        return state

    # ---- one text ------------------------------------------------------------------

    def _prepare(self, text: str, originals: list | None) -> dict:
        """Token ids with a mask slot per token to fill, and what each gap needs."""
        segs = text.split(MASK_TOKEN)
        n = len(segs) - 1
        if originals is not None and len(originals) != n:
            # a stage between mask and refill changed the masks: forbid every hidden word
            # of the record at every gap
            every = {w for o in originals if o for w in _words(o)}
            gaps = [every or None] * n
        else:
            gaps = [({w for w in _words(o)} if o else None) for o in (originals or [None] * n)]
        ids: list[int] = []
        slots: list[tuple[int, int, int]] = []  # (position in ids, gap, token index)
        for g, seg in enumerate(segs):
            strip = g < n and self._vocab.strips_space and seg.endswith(" ")
            if strip:
                seg = seg[:-1]
            ids.extend(self._tok(seg, add_special_tokens=False)["input_ids"] if seg else [])
            if g < n:
                for t in range(self.settings.tokens_per_mask):
                    slots.append((len(ids), g, t))
                    ids.append(self._tok.mask_token_id)
        return {"segs": segs, "ids": ids, "slots": slots, "hidden": gaps,
                "fills": [[] for _ in range(n)], "known": [o is not None for o in gaps]}

    def _window(self, ids: list[int], pos: int) -> tuple[list[int], int]:
        """A window of at most the model's width around ``pos``, with the tokenizer's
        special tokens; returns it and ``pos`` within it."""
        w = self._width
        start = max(0, min(pos - w // 2, len(ids) - w))
        head, tail = self._around
        return head + ids[start:start + w] + tail, len(head) + pos - start

    def _choose(self, logits, st: dict, gap: int, t: int, rng, counts: dict) -> int:
        v = self._vocab
        cand = v.candidates()
        if not cand.any():
            cand = v.ok
        scores = np.where(cand, logits, -np.inf)
        hidden = st["hidden"][gap]
        if hidden:
            top = int(np.argmax(scores))
            counts["top_choice_original"] += int(t == 0 and v.lower[top] in hidden)
            if self.settings.forbid_original:
                bad = np.fromiter((w in hidden for w in v.lower), bool, len(v.lower)) & cand
                if (cand & ~bad).any():
                    scores = np.where(bad, -np.inf, scores)
        if self.settings.strategy == "top1":
            choice = int(np.argmax(scores))
        else:
            k = min(self.settings.k, int(np.isfinite(scores).sum()))
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.lexsort((top, -scores[top]))]  # by score, ties by id: a stable order
            outside = top[~v.allowed[top]]
            pool = outside if len(outside) else top
            choice = int(pool[rng.integers(len(pool))])
        counts["fills_on_allow_list"] += int(v.allowed[choice]) if t == 0 else 0
        return choice

    def _fill(self, texts: list[str], originals: list) -> tuple[list[str], list[list[dict]], list[dict]]:
        import torch

        states = [self._prepare(t, o) for t, o in zip(texts, originals)]
        rngs = [np.random.default_rng([self.settings.seed, int.from_bytes(
            hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest()[:8], "big")]) for t in texts]
        counts = [{"top_choice_original": 0, "fills_on_allow_list": 0} for _ in texts]
        step = 0
        pad = self._tok.pad_token_id if self._tok.pad_token_id is not None else 0
        while True:
            todo = [(i, st["slots"][step]) for i, st in enumerate(states) if step < len(st["slots"])]
            if not todo:
                break
            for lo in range(0, len(todo), self.settings.batch_size):
                part = todo[lo:lo + self.settings.batch_size]
                wins = [self._window(states[i]["ids"], pos) for i, (pos, _, _) in part]
                width = max(len(w) for w, _ in wins)
                x = torch.full((len(wins), width), pad, dtype=torch.long)
                att = torch.zeros((len(wins), width), dtype=torch.long)
                for r, (w, _) in enumerate(wins):
                    x[r, :len(w)] = torch.as_tensor(w)
                    att[r, :len(w)] = 1
                at = torch.as_tensor([p for _, p in wins])
                with torch.inference_mode():
                    out = self._model(input_ids=x.to(self._device), attention_mask=att.to(self._device)).logits
                    logits = out[torch.arange(len(wins)), at.to(self._device)].float().cpu().numpy()
                for r, (i, (pos, gap, t)) in enumerate(part):
                    choice = self._choose(logits[r], states[i], gap, t, rngs[i], counts[i])
                    states[i]["ids"][pos] = choice
                    states[i]["fills"][gap].append(choice)
            step += 1
        texts_out, spans = [], []
        for st, c in zip(states, counts):
            text, sp = self._render(st)
            texts_out.append(text)
            spans.append(sp)
            c["masks_filled"] = len(st["fills"])
            c["original_known"] = sum(st["known"])
        return texts_out, spans, counts

    def _render(self, st: dict) -> tuple[str, list[dict]]:
        v, out, spans, pos = self._vocab, [], [], 0
        segs = st["segs"]
        for g, seg in enumerate(segs):
            if g == len(segs) - 1:
                out.append(seg)
                break
            strip = v.strips_space and seg.endswith(" ")
            left = seg[:-1] if strip else seg
            out.append(left)
            pos += len(left)
            words = [v.text[i] for i in st["fills"][g]]
            lead = " " if strip else ""
            fill = lead + words[0] + "".join((" " if v.starts[i] or v.style == "wordpiece" else "") + v.text[i]
                                             for i in st["fills"][g][1:])
            spans.append({"start": pos + len(lead), "end": pos + len(fill)})
            out.append(fill)
            pos += len(fill)
        return "".join(out), spans

    def process_batch(self, batch: pa.Table) -> pa.Table:
        if self._model is None:
            self.setup()
        texts = batch["text"].to_pylist()
        originals = batch[ORIGINALS].to_pylist() if ORIGINALS in batch.column_names else [None] * len(texts)
        live = [i for i, t in enumerate(texts) if isinstance(t, str)]
        filled, spans, counts = self._fill([texts[i] for i in live], [originals[i] for i in live])
        new_text, new_spans = list(texts), [None] * len(texts)
        stats = {k: [0] * len(texts) for k in ("masks_filled", "top_choice_original", "fills_on_allow_list",
                                              "original_known")}
        for i, t, sp, c in zip(live, filled, spans, counts):
            new_text[i], new_spans[i] = t, sp
            for k in stats:
                stats[k][i] = c[k]
        if ORIGINALS in batch.column_names:
            batch = batch.drop_columns([ORIGINALS])
        batch = set_column(batch, "text", pa.array(new_text, pa.string()))
        batch = set_column(batch, "refill_spans", pa.array(new_spans, SPANS_TYPE))
        if len(live) < len(texts):
            batch = set_column(batch, QUARANTINE, pa.array([None if isinstance(t, str) else NO_TEXT for t in texts],
                                                           pa.string()))
        for name, values in stats.items():
            batch = set_column(batch, f"_stat.{name}", pa.array(values, pa.int64()))
        return batch


def special_around(tok) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text (BERT's [CLS] and
    [SEP]; none for a tokenizer trained by ``privatize train``)."""
    bare = tok("word", add_special_tokens=False)["input_ids"]
    full = tok("word", add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare:
            return full[:i], full[i + len(bare):]
    return [], []


def _words(span: str) -> list[str]:
    return [m.group().lower().replace("’", "'") for m in WORD.finditer(span)]
