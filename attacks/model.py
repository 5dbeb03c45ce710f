"""The model adapter: a checkpoint directory -> per-token log-probabilities, losses,
candidate scores and generations. The only module of ``attacks`` that imports torch;
every attack is a function over what it returns (numpy arrays and strings).

A checkpoint is any Hugging Face causal-LM folder with its tokenizer, or a training run
folder of ``privatize train`` (its ``model/`` subfolder). Texts are scored the way the
trainer saw them: each document follows an end-of-text token (documents are packed
``<|endoftext|>``-separated), so the first token of a text is scored too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from privatize.errors import SpecError


def checkpoint_dir(path: str | Path) -> Path:
    """The model folder of ``path``: itself, or ``path/model`` for a training run."""
    p = Path(path)
    for cand in (p, p / "model"):
        if (cand / "config.json").is_file():
            return cand
    raise SpecError(f"model: {path} is neither a Hugging Face checkpoint (config.json) nor a training run (model/)")


@dataclass
class TokenScores:
    """One text's scores, aligned to its tokens (the first token is conditioned on EOS)."""

    logprobs: np.ndarray  # log p(token_i | tokens_<i)
    mu: np.ndarray  # E_{z~p(.|<i)} log p(z): min-k%++ normalisation
    sigma: np.ndarray  # the standard deviation of log p(z) under the same distribution
    greedy: np.ndarray | None = None  # token_i is the model's top choice (``token_scores(greedy=True)``)


class ModelAdapter:
    """A loaded causal LM and its tokenizer, in eval mode, on ``device``."""

    def __init__(self, model, tokenizer, *, device: str = "cpu", name: str = ""):
        self.model = model.to(device).eval()
        self.tok = tokenizer
        self.device = device
        self.name = name
        self.bos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.bos_token_id
        self.max_len = int(getattr(model.config, "max_position_embeddings", 512))

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu", dtype=torch.float32,
             threads: int | None = None) -> "ModelAdapter":
        """The model and tokenizer of a run folder or checkpoint; ``threads``: torch's
        intra-op threads in this process (one per Ray actor when actors are the
        parallelism)."""
        from transformers import AutoModelForCausalLM

        if threads is not None:
            torch.set_num_threads(threads)
        from train.tokenizer import load_tokenizer

        d = checkpoint_dir(path)
        tok = load_tokenizer(str(d), what="model")
        model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype)
        return cls(model, tok, device=device, name=str(path))

    # -- encoding -------------------------------------------------------------------

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with the leading EOS, truncated to the model's context."""
        ids = self.tok(list(texts), add_special_tokens=False)["input_ids"]
        return [[self.bos] + x[: self.max_len - 1] for x in ids]

    def offsets(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each scored token's character range in its text, ``(n, 2)``, aligned to
        :meth:`token_scores` (the leading EOS is not scored; the same truncation)."""
        enc = self.tok(list(texts), add_special_tokens=False, return_offsets_mapping=True)
        return [np.array(o[: self.max_len - 1], dtype=np.int64).reshape(-1, 2) for o in enc["offset_mapping"]]

    def _batches(self, seqs: list[list[int]], batch_tokens: int):
        """Batches of (indices, padded ids, lengths), grouped by length to waste little."""
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        i = 0
        while i < len(order):
            width = len(seqs[order[i]])
            j = i
            while j < len(order) and (j - i + 1) * max(width, len(seqs[order[j]])) <= batch_tokens:
                width = max(width, len(seqs[order[j]]))
                j += 1
            j = max(j, i + 1)
            idx = order[i:j]
            width = max(len(seqs[k]) for k in idx)
            pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.bos
            arr = np.full((len(idx), width), pad, dtype=np.int64)
            for r, k in enumerate(idx):
                arr[r, : len(seqs[k])] = seqs[k]
            yield idx, torch.from_numpy(arr).to(self.device), [len(seqs[k]) for k in idx]
            i = j

    # -- scores ---------------------------------------------------------------------

    @torch.inference_mode()
    def token_scores(self, texts: Sequence[str], *, batch_tokens: int = 16384,
                     progress: Callable[[int], None] | None = None, greedy: bool = False) -> list[TokenScores]:
        """Per-token log-probabilities (and min-k%++ statistics) of each text; with
        ``greedy``, also whether each token is the model's top choice in its context
        (what it would predict there: paper 003's "the model predicts the identifier")."""
        seqs = self.encode(texts)
        out: list[TokenScores | None] = [None] * len(seqs)
        for idx, ids, lens in self._batches(seqs, batch_tokens):
            mask = (torch.arange(ids.shape[1], device=self.device)[None, :] < torch.tensor(lens, device=self.device)[:, None])
            logits = self.model(input_ids=ids, attention_mask=mask.long()).logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1)
            target = ids[:, 1:]
            lp = logp.gather(-1, target[..., None])[..., 0]
            p = logp.exp()
            mu = (p * logp).sum(-1)
            sigma = ((p * logp * logp).sum(-1) - mu * mu).clamp_min(0).sqrt()
            top = (logp.argmax(-1) == target) if greedy else None
            for r, k in enumerate(idx):
                n = lens[r] - 1
                out[k] = TokenScores(lp[r, :n].cpu().numpy(), mu[r, :n].cpu().numpy(), sigma[r, :n].cpu().numpy(),
                                     None if top is None else top[r, :n].cpu().numpy())
            if progress:
                progress(len(idx))
        return out  # type: ignore[return-value]

    def losses(self, texts: Sequence[str], **kw) -> np.ndarray:
        """Mean negative log-likelihood per token of each text."""
        return np.array([-float(s.logprobs.mean()) if len(s.logprobs) else float("nan")
                         for s in self.token_scores(texts, **kw)])

    def perplexity(self, texts: Sequence[str], **kw) -> float:
        """Token-weighted perplexity over ``texts``."""
        scores = self.token_scores(texts, **kw)
        total = sum(float(s.logprobs.sum()) for s in scores)
        n = sum(len(s.logprobs) for s in scores)
        return math.exp(-total / max(1, n))

    # -- candidates -----------------------------------------------------------------

    def digit_ids(self) -> list[int]:
        """The token ids of 0..9; refuses a tokenizer that merges digits (candidates of one
        canary would then have different lengths and tokenisations)."""
        ids = []
        for d in "0123456789":
            got = self.tok(d, add_special_tokens=False)["input_ids"]
            if len(got) != 1:
                raise SpecError(f"model: the tokenizer of {self.name} does not keep digit {d} as one token")
            ids.append(got[0])
        probes = ["0123456789", "1234567890", "0000000000", "9999999999",
                  "".join("0123456789"[(7 * i + 3) % 10] for i in range(12))]
        if any(self.tok(p, add_special_tokens=False)["input_ids"] != [ids[int(c)] for c in p] for p in probes):
            raise SpecError(f"model: the tokenizer of {self.name} merges digits (a digit-level tokenizer is needed "
                            "for exact exposure; retrain with this project's tokenizer)")
        return ids

    def _prefix_ids(self, prefix: str, digit_ids: list[int]) -> list[int]:
        ids = self.encode([prefix])[0]
        whole = self.encode([prefix + "0123456789"])[0]
        if whole != ids + digit_ids:
            raise SpecError(f"canaries.format: the text before {{secret}} ({prefix!r}) does not tokenize apart from "
                            "the digits after it")
        return ids

    @torch.inference_mode()
    def digit_scores_trie(self, prefix: str, digits: int, *, chunk: int = 2048,
                          progress: Callable[[int], None] | None = None) -> np.ndarray:
        """log P(secret | prefix) for every ``digits``-digit secret, index = the secret as
        an integer. Secrets share prefixes: the digit trie has 1 + 10 + ... + 10^(digits-1)
        inner nodes, and each is one forward step of one token on its parent's KV cache,
        so 10^6 candidates cost about 111,111 one-token steps instead of 10^6 full passes.
        The last digit needs no forward step: its distribution is the parent's output."""
        from transformers import DynamicCache

        dig = self.digit_ids()
        dig_t = torch.tensor(dig, device=self.device)
        ids = torch.tensor([self._prefix_ids(prefix, dig)], device=self.device)
        out = torch.empty(10 ** digits, dtype=torch.float64)
        res = self.model(input_ids=ids, use_cache=True)
        root = res.past_key_values
        lp0 = torch.log_softmax(res.logits[:, -1].float(), -1)[:, dig_t]

        def sub(cache, lo: int, hi: int) -> "DynamicCache":
            # the parents lo..hi, each repeated for its 10 children
            return DynamicCache(ddp_cache_data=[(layer.keys[lo:hi].repeat_interleave(10, 0),
                                                 layer.values[lo:hi].repeat_interleave(10, 0))
                                                for layer in cache.layers])

        def expand(cache, lp: torch.Tensor, base: torch.Tensor, depth: int, first: int) -> None:
            # ``lp`` (B, 10): the next-digit log-probs of B nodes at ``depth``; ``base`` (B,)
            # their scores; ``first``: the index of node 0 among the nodes at ``depth``.
            child = (base[:, None] + lp.double()).reshape(-1)
            if depth + 1 == digits:
                out[first * 10: first * 10 + child.numel()] = child.cpu()
                if progress:
                    progress(child.numel())
                return
            group = max(1, chunk // 10)
            for s in range(0, lp.shape[0], group):
                e = min(lp.shape[0], s + group)
                c = sub(cache, s, e)
                step = dig_t.repeat(e - s)[:, None]
                logits = self.model(input_ids=step, past_key_values=c, use_cache=True).logits[:, -1].float()
                expand(c, torch.log_softmax(logits, -1)[:, dig_t], child[s * 10: e * 10], depth + 1, (first + s) * 10)

        expand(root, lp0, torch.zeros(1, dtype=torch.float64, device=self.device), 0, 0)
        return out.numpy()

    @torch.inference_mode()
    def digit_scores_naive(self, prefix: str, secrets: Sequence[str], *, batch: int = 512,
                           progress: Callable[[int], None] | None = None) -> np.ndarray:
        """The same scores, one full forward pass per candidate (the baseline and oracle)."""
        dig = self.digit_ids()
        pre = self._prefix_ids(prefix, dig)
        out = np.empty(len(secrets))
        for s in range(0, len(secrets), batch):
            part = secrets[s: s + batch]
            rows = torch.tensor([pre + [dig[int(c)] for c in x] for x in part], device=self.device)
            logp = torch.log_softmax(self.model(input_ids=rows).logits[:, :-1].float(), -1)
            lp = logp.gather(-1, rows[:, 1:, None])[..., 0]
            out[s: s + len(part)] = lp[:, len(pre) - 1:].double().sum(-1).cpu().numpy()
            if progress:
                progress(len(part))
        return out

    # -- generation -----------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, prompts: Sequence[str], *, samples: int = 1, max_new_tokens: int = 32,
                 temperature: float = 1.0, top_k: int = 64, seed: int = 0, batch: int = 64) -> list[list[str]]:
        """``samples`` continuations per prompt (only the new text, up to the first
        end-of-text), sampled with top-k. Prompts are batched together, left-padded."""
        torch.manual_seed(seed)
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.bos
        keep = self.max_len - max_new_tokens
        rows = [(i, ids[-keep:]) for i, ids in enumerate(self.encode(list(prompts))) for _ in range(samples)]
        out: list[list[str]] = [[] for _ in prompts]
        for s in range(0, len(rows), batch):
            part = rows[s: s + batch]
            width = max(len(ids) for _, ids in part)
            arr = torch.full((len(part), width), pad, dtype=torch.long)
            mask = torch.zeros((len(part), width), dtype=torch.long)
            for r, (_, ids) in enumerate(part):
                arr[r, width - len(ids):] = torch.tensor(ids)
                mask[r, width - len(ids):] = 1
            gen = self.model.generate(arr.to(self.device), attention_mask=mask.to(self.device), do_sample=True,
                                      temperature=temperature, top_k=top_k, max_new_tokens=max_new_tokens,
                                      pad_token_id=pad, eos_token_id=self.bos)
            for (i, _), ids in zip(part, gen[:, width:].tolist()):
                if self.bos in ids:
                    ids = ids[: ids.index(self.bos)]
                out[i].append(self.tok.decode([t for t in ids if t != pad], skip_special_tokens=False))
        return out
