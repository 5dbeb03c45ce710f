"""Paper 003's privacy metrics for a masked language model (SEEDS.md section 5): which
identifiers a masked LM *predicts* when they are masked.

For each identifier occurrence (a span of the ``identifier_spans`` column), every token
that overlaps it is replaced by the tokenizer's mask token, the rest of the record stays
as it is (the context), and the occurrence counts as predicted when the model's top-1
token at every masked position is the original token. The answer fills the same
:class:`attacks.identifiers.Leaks` as the causal side, so :func:`attacks.identifiers.privacy`
and :func:`attacks.identifiers.low_cost_mia` apply unchanged. Regurgitation (identifiers
in free generations) does not apply to a masked LM, which does not generate text: the
``regurgitated`` sets stay empty. ``Leaks.loss`` holds each record's mean cross-entropy
at randomly masked positions (:meth:`MaskedLMAdapter.masked_scores`), so
:func:`attacks.identifiers.loss_mia` applies too.

* :class:`MaskedLMAdapter`: a local Hugging Face ``AutoModelForMaskedLM`` folder (one
  trained with ``privatize train`` kind ``mlm``, or a downloaded BERT) and its tokenizer,
  in eval mode, fp32, on CPU by default; windows of at most ``max_length`` tokens around
  what is asked, batched.
* :func:`mlm_leaks`: the spans each record's model predicts, and each record's loss.
* :func:`masked_utility`: masked-token accuracy and perplexity over texts with a seeded
  share of their tokens masked (the utility figure in place of the causal perplexity).

torch is imported inside the methods (as :mod:`experiments.quality_eval` does): importing
this module does not load it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from attacks.identifiers import Leaks, Record


@dataclass
class MaskedScores:
    """One text's randomly masked positions (indices into its tokens), the cross-entropy
    of the original token at each, and whether it was the model's top-1 choice."""

    positions: np.ndarray
    nll: np.ndarray
    correct: np.ndarray


class MaskedLMAdapter:
    """A loaded masked LM and its tokenizer, in eval mode, on ``device``.

    A text is shown to the model the way ``privatize train`` kind ``mlm`` saw it: between
    end-of-text tokens (documents are packed ``<|endoftext|>``-separated), or between the
    tokenizer's own special tokens ([CLS] ... [SEP]) when it adds some. Texts longer than
    ``max_length`` tokens are cut into windows (around each masked span; consecutive for
    random masking). Use the training's ``seq_len``: positions beyond it were never
    trained."""

    def __init__(self, model, tokenizer, *, device: str = "cpu", max_length: int = 128, batch_tokens: int = 16384,
                 name: str = ""):
        if tokenizer.mask_token_id is None:
            raise ValueError(f"masked LM {name or ''}: its tokenizer has no mask token")
        self.model = model.to(device).eval()
        self.tok = tokenizer
        self.device = device
        self.name = name
        self.mask_id = int(tokenizer.mask_token_id)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        from privatize.stages.refill import special_around

        self.head, self.tail = special_around(tokenizer)
        eos = tokenizer.eos_token_id
        # our tokenizers add nothing around a text: documents sit between end-of-text tokens
        self.edge = [eos] if not self.head and not self.tail and eos is not None else []
        limit = int(getattr(model.config, "max_position_embeddings", max_length))
        self.width = min(max_length, limit) - len(self.head) - len(self.tail)
        if self.width < 8:
            raise ValueError(f"masked LM {name}: max_length {max_length} leaves no room for text")
        self.batch_tokens = batch_tokens
        # BERT (what kind mlm trains): the encoder, then its output layer at the masked
        # positions alone (the vocabulary projection is most of a tiny model's cost)
        bert = getattr(model, "bert", None)
        self._split = (bert, model.cls) if type(model).__name__ == "BertForMaskedLM" and bert is not None else None

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu", max_length: int = 128, **kw) -> "MaskedLMAdapter":
        import torch
        from transformers import AutoModelForMaskedLM

        from attacks.model import checkpoint_dir
        from train.tokenizer import load_tokenizer

        d = checkpoint_dir(path)
        tok = load_tokenizer(str(d), what="model")
        model = AutoModelForMaskedLM.from_pretrained(d, dtype=torch.float32)
        return cls(model, tok, device=device, max_length=max_length, name=str(path), **kw)

    # -- encoding -------------------------------------------------------------------

    def _encode(self, texts: Sequence[str]) -> list[tuple[list[int], np.ndarray]]:
        """Each text's token ids (with the end-of-text edges, if any) and the character
        range of each text token, ``(n, 2)`` (the edges have none)."""
        enc = self.tok(list(texts), add_special_tokens=False, return_offsets_mapping=True)
        return [(self.edge + list(ids) + self.edge, np.array(off, dtype=np.int64).reshape(-1, 2))
                for ids, off in zip(enc["input_ids"], enc["offset_mapping"])]

    def _rows(self, rows: list[tuple[list[int], list[int]]]):
        """Forward ``rows`` (window ids with the masks in place, masked positions in the
        window), batched by length; yields (row index, logits at its masked positions)."""
        import torch

        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        i = 0
        while i < len(order):
            j = i + 1  # the rows are in increasing length: the last one taken is the widest
            while j < len(order) and (j - i + 1) * len(rows[order[j]][0]) <= self.batch_tokens:
                j += 1
            idx = order[i:j]
            width = len(rows[idx[-1]][0])
            x = torch.full((len(idx), width), self.pad, dtype=torch.long)
            att = torch.zeros((len(idx), width), dtype=torch.long)
            for r, k in enumerate(idx):
                ids = rows[k][0]
                x[r, :len(ids)] = torch.as_tensor(ids)
                att[r, :len(ids)] = 1
            r_at = torch.as_tensor([r for r, k in enumerate(idx) for _ in rows[k][1]], dtype=torch.long)
            p_at = torch.as_tensor([p for k in idx for p in rows[k][1]], dtype=torch.long)
            with torch.inference_mode():
                x, att = x.to(self.device), att.to(self.device)
                r_at, p_at = r_at.to(self.device), p_at.to(self.device)
                if self._split is not None:  # the output layer only where something is masked
                    base, head = self._split
                    flat = head(base(input_ids=x, attention_mask=att).last_hidden_state[r_at, p_at])
                else:
                    flat = self.model(input_ids=x, attention_mask=att).logits[r_at, p_at]
                flat = flat.float().cpu()
            at = 0
            for k in idx:
                n = len(rows[k][1])
                yield k, flat[at:at + n]
                at += n
            i = j

    def _window(self, ids: list[int], lo: int, hi: int) -> tuple[list[int], int]:
        """A window of at most ``width`` tokens of ``ids`` holding ``ids[lo:hi]`` as near
        its middle as the edges allow, with the special tokens around; returns it and
        where ``ids[0]`` would sit (window position = id index + shift)."""
        w = self.width
        start = max(0, min(lo - (w - (hi - lo)) // 2, len(ids) - w))
        return self.head + ids[start:start + w], len(self.head) - start

    # -- questions ------------------------------------------------------------------

    def predicted(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
                  memo: dict | None = None) -> list[np.ndarray]:
        """For each text, whether each of its character spans is predicted: every token
        overlapping the span masked (the rest of the text as it is), and the model's
        top-1 token at each masked position the original one. A span that covers no
        token, or more tokens than a window holds, is not predicted. Identical questions
        (the same text, the same tokens masked) are asked once; ``memo``, a dict shared
        between calls on the same model, keeps the answers across calls."""
        memo = {} if memo is None else memo
        encoded = self._encode(texts)
        out = [np.zeros(len(s), bool) for s in spans]
        todo: dict[tuple, list[tuple[int, int]]] = {}
        rows: list[tuple[list[int], list[int]]] = []
        keys: list[tuple] = []
        for t, ((ids, off), sps) in enumerate(zip(encoded, spans)):
            digest = None
            for j, (a, b) in enumerate(sps):
                at = np.flatnonzero((off[:, 0] < b) & (off[:, 1] > a)) + len(self.edge) if len(off) else []
                if len(at) == 0 or at[-1] - at[0] + 1 > self.width:
                    continue
                digest = digest or hashlib.sha256(texts[t].encode("utf-8", "surrogatepass")).digest()
                key = (digest, tuple(int(p) for p in at))
                if key in memo:
                    out[t][j] = memo[key]
                    continue
                if key not in todo:
                    todo[key] = []
                    win, shift = self._window(ids, int(at[0]), int(at[-1]) + 1)
                    win = list(win) + self.tail
                    pos = [int(p) + shift for p in at]
                    for p in pos:
                        win[p] = self.mask_id
                    rows.append((win, pos))
                    keys.append(key)
                todo[key].append((t, j))
        if rows:
            originals = {}
            for key in keys:
                t, _ = todo[key][0]
                originals[key] = [encoded[t][0][p] for p in key[1]]
            for k, logits in self._rows(rows):
                key = keys[k]
                hit = bool((logits.argmax(-1).numpy() == np.asarray(originals[key])).all())
                memo[key] = hit
                for t, j in todo[key]:
                    out[t][j] = hit
        return out

    def masked_scores(self, texts: Sequence[str], *, probability: float = 0.15, seed: int = 0) -> list[MaskedScores]:
        """Mask ``probability`` of each text's tokens (a draw seeded by ``seed`` and the
        text, so the same text is masked the same way by every model), all with the mask
        token, the text cut into consecutive windows; the cross-entropy of the original
        token at each masked position and whether it is the top-1 choice."""
        import torch

        rows: list[tuple[list[int], list[int]]] = []
        where: list[tuple[int, list[int]]] = []  # (text, token indices) per row
        origin: list[list[int]] = []
        chosen_per_text = []
        for t, (ids, off) in enumerate(self._encode(texts)):
            rng = np.random.default_rng([seed, int.from_bytes(
                hashlib.sha256(texts[t].encode("utf-8", "surrogatepass")).digest()[:8], "big")])
            n = len(off)
            chosen = np.flatnonzero(rng.random(n) < probability)
            chosen_per_text.append(chosen)
            e = len(self.edge)
            for start in range(0, len(ids), self.width):
                inside = [int(c) for c in chosen if start <= c + e < start + self.width]
                if not inside:
                    continue
                win = self.head + list(ids[start:start + self.width]) + self.tail
                pos = [c + e - start + len(self.head) for c in inside]
                origin.append([win[p] for p in pos])
                for p in pos:
                    win[p] = self.mask_id
                rows.append((win, pos))
                where.append((t, inside))
        nll = [dict() for _ in texts]
        hit = [dict() for _ in texts]
        for k, logits in self._rows(rows):
            t, inside = where[k]
            target = torch.as_tensor(origin[k])
            lp = torch.log_softmax(logits, -1)
            loss = -lp.gather(-1, target[:, None])[:, 0].numpy()
            top = (logits.argmax(-1) == target).numpy()
            for c, v, h in zip(inside, loss, top):
                nll[t][c], hit[t][c] = float(v), bool(h)
        out = []
        for t, chosen in enumerate(chosen_per_text):
            out.append(MaskedScores(chosen, np.array([nll[t][int(c)] for c in chosen], np.float64),
                                    np.array([hit[t][int(c)] for c in chosen], bool)))
        return out


def mlm_leaks(adapter: MaskedLMAdapter, records: list[Record], *, loss: bool = True, probability: float = 0.15,
              seed: int = 0, memo: dict | None = None) -> Leaks:
    """Ask a masked LM about ``records``: which of each record's identifier spans it
    predicts when they are masked (:meth:`MaskedLMAdapter.predicted`); with ``loss``, each
    record's mean cross-entropy over ``probability`` of its tokens masked at ``seed``
    (``Leaks.loss`` and ``Leaks.tokens``, for :func:`attacks.identifiers.loss_mia`).
    ``regurgitated`` stays empty: a masked LM does not generate free text."""
    out = Leaks()
    hits = adapter.predicted([r.text for r in records], [[(int(s["start"]), int(s["end"])) for s in r.spans]
                                                        for r in records], memo=memo)
    for r, h in zip(records, hits):
        out.predicted[r.doc_id] = {int(j) for j in np.flatnonzero(h)}
    if loss:
        for r, s in zip(records, adapter.masked_scores([r.text for r in records], probability=probability,
                                                       seed=seed)):
            out.loss[r.doc_id] = float(s.nll.mean()) if len(s.nll) else float("nan")
            out.tokens[r.doc_id] = len(s.nll)
    return out


def masked_utility(adapter: MaskedLMAdapter, texts: Sequence[str], *, probability: float = 0.15,
                   seed: int = 0) -> dict:
    """The masked LM's utility on ``texts``: ``probability`` of their tokens masked at
    ``seed`` (all at once per window, every one with the mask token), the share of masked
    tokens whose top-1 prediction is the original (``accuracy``) and the exponential of
    the mean cross-entropy there (``perplexity``, masked-token perplexity: one pass, not
    the one-token-at-a-time pseudo-perplexity)."""
    scores = adapter.masked_scores(texts, probability=probability, seed=seed)
    nll = np.concatenate([s.nll for s in scores]) if scores else np.zeros(0)
    correct = np.concatenate([s.correct for s in scores]) if scores else np.zeros(0, bool)
    return {"masked_tokens": int(len(nll)), "accuracy": float(correct.mean()) if len(nll) else float("nan"),
            "perplexity": math.exp(float(nll.mean())) if len(nll) else float("nan"),
            "probability": probability, "seed": seed}
