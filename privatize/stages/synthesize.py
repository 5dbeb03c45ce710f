"""``synthesize``: grow a small corpus into synthetic training text with an LLM, through
SoE's weighted entity graph (paper 001, SEEDS.md section 3, after EntiGraph), without
plaintext PII reaching the LLM: it runs after ``redact`` (or ``mask``), so the entities
it sees are entity tokens (``Person_[...]``).

Per article (a record):

1. **entities**: the entity tokens in the text (``operator: encrypt``), plus, with
   ``llm_entities``, those an LLM lists; the ``max_entities`` most mentioned are kept
   (ties: first mentioned), so pair scoring stays bounded;
2. **descriptions** (``descriptions``, on): one per entity;
3. **association scores**: the paper's Appendix C prompt for each candidate pair (all
   pairs, or with ``sentence_window: N`` pairs mentioned within N sentences of each
   other), read from ``Score: <x>`` (:func:`privatize.synthesis.graph.parse_score`); an
   answer without a readable score in [0, 1] is counted and the pair dropped;
4. **graph**: edges below ``threshold`` (0.5) dropped; per entity, a tuple of itself and
   its ``max_k - 1`` (9) strongest neighbours;
5. **samples**: question-answer pairs (``qa``) and a relation analysis (``relation``) per
   tuple, conditioned on the article; a sample that does not follow its instruction is
   counted by reason (``empty``, ``format``, ``entities``) and left out.

Output: the article itself (unless ``keep_source: false``, then it is dropped and counted)
and one record per kept sample: ``doc_id`` ``<article>/syn-<n>``, the text, the article's
``individual_id`` and ``meta``, and the columns ``synthesis_source`` (the article's id),
``synthesis_prompt`` (``description``, ``qa`` or ``relation``) and ``synthesis_entities``
(the tuple), null on the articles themselves; ``_seg`` numbers the samples. Statistics: ``requests`` (answered, cached or not), ``requests_cached``,
``tokens_in``, ``tokens_out``, ``score_missing``, ``score_out_of_range``, ``edges``,
``tuples``, ``filtered_<reason>``, ``samples``, ``source_words`` and ``synthetic_words`` (the
manifest's ``synthetic_words / source_words`` is the growth factor).

The LLM: ``llm: {base_url, model, api_key}`` for any OpenAI-compatible chat-completions
server (hosted APIs, vLLM, SGLang, Ollama, ``transformers serve``); ``api_key`` is a
reference (``env:NAME``, ``file:PATH``, ``keystore:ID``) resolved in the worker, never a
key. Answers are cached under ``cache`` (a folder, relative to the spec's; null keeps
none), so a re-run sends no request twice and, at temperature 0, writes the same output;
``max_requests`` and ``max_tokens`` stop a run before it overspends, on every node of a
Ray run (one ledger actor per run: :mod:`privatize.synthesis.client`).
Ray Data's LLM processors (``ray.data.llm``) transform a whole Dataset, which the
in-process runner and this stage's per-article graph (scores before samples) do not fit;
the stage sends its own concurrent requests from an actor pool instead. Measured
(``benchmarks/synthesis_throughput.py --ray-data-llm``, Ray 2.60): its HTTP request
processor has one request in flight per actor (it creates a batch's posts, then awaits
them one after another), 4.9 requests/s against a server that answers in 200 ms, where
this stage's client keeps 64 in flight (272 requests/s).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Annotated, Literal, Optional

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from privatize.ciphers.tokens import ENTITY_TOKEN_RE
from privatize.policy import AllowList, Credential, ServerPath
from privatize.settings import AfterOneOf, Before, SecretRef, StageSettings
from privatize.stage import DROP, QUARANTINE, Stage, register_stage, set_column
from privatize.synthesis import graph, prompts

log = logging.getLogger(__name__)

NO_TEXT = "no text to synthesize from"
SYNTHESIZED = "synthesized (keep_source: false)"
MAX_SAMPLES = 60_000  # _seg is 16 bits in the router's packed order
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: Annotated[str, AllowList(
        "llm_base_url_list", refused="not an LLM endpoint of this service (it calls {allowed})",
        none="this service calls no LLM endpoint (its operator lists them in PRIVATIZE_LLM_BASE_URLS)")] = Field(
        min_length=1, max_length=500, pattern=r"^https?://")
    model: str = Field(min_length=1, max_length=200)
    api_key: Annotated[Optional[SecretRef], Credential()] = Field(None, max_length=300,
                                         description="a reference: env:NAME, file:PATH or keystore:ID (an api-key "
                                                     "key), never the key")
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(512, ge=1, le=32_768, description="per answer")
    timeout_s: float = Field(60.0, gt=0, le=3600)
    max_in_flight: int = Field(16, ge=1, le=1024)
    requests_per_second: Optional[float] = Field(None, gt=0)
    max_retries: int = Field(5, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0, le=60)


class SynthesizeSettings(StageSettings):
    kind: Literal["synthesize"] = "synthesize"
    order_rules = (
        AfterOneOf(("redact", "mask"), "synthesize sends its articles to an LLM: put redact (operator encrypt, mask or "
                                       "tag) or mask before it, or set allow_plaintext: true",
                   when={"allow_plaintext": False}),
        Before("split", "synthesize works on whole articles: put split after it"),
        Before("encrypt_text", "synthesize after encrypt_text would send ciphertext: put the cipher after it"),
    )
    llm: LLMSettings
    allow_plaintext: bool = False
    """Send articles that no redaction touched (warns)."""
    llm_entities: bool = False
    max_entities: int = Field(20, ge=2, le=200)
    descriptions: bool = True
    sentence_window: Optional[int] = Field(None, ge=0, le=1000)
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    max_k: int = Field(10, ge=2, le=50)
    keep_source: bool = True
    cache: Annotated[Optional[str], ServerPath(cleared=True)] = Field(".llm-cache", min_length=1, max_length=500,
                                 description="the answers' folder (relative to the spec's); null: none kept "
                                             "(a re-run sends its requests again)")
    max_requests: Optional[int] = Field(None, ge=1)
    max_tokens: Optional[int] = Field(None, ge=1)

    @model_validator(mode="after")
    def _warn(self) -> "SynthesizeSettings":
        if self.allow_plaintext:
            log.warning("synthesize: allow_plaintext is on: articles may reach the LLM with plaintext PII")
        return self


def _words(text: str) -> int:
    return len(text.split())


@register_stage("synthesize", SynthesizeSettings)
class Synthesize(Stage):
    heavy_setup = True  # one HTTP client and its cache per actor: an actor pool on Ray
    _client = None

    def setup(self) -> None:
        from privatize.synthesis.client import ChatClient, resolve_api_key

        st, llm = self.settings, self.settings.llm
        base = self.context.base_dir
        cache = None if st.cache is None else \
            Path(st.cache) if Path(st.cache).is_absolute() or not base else Path(base) / st.cache
        key = resolve_api_key(llm.api_key, base, self.context.key_resolver)
        self._client = ChatClient(llm.base_url, llm.model, api_key=key, cache_dir=cache, temperature=llm.temperature,
                                  max_tokens=llm.max_tokens, timeout_s=llm.timeout_s, max_in_flight=llm.max_in_flight,
                                  requests_per_second=llm.requests_per_second, max_retries=llm.max_retries,
                                  backoff_s=llm.backoff_s, max_requests=st.max_requests,
                                  max_total_tokens=st.max_tokens, ledger=self.ledger_name())

    def ledger_name(self) -> str | None:
        """The name of this run's budget ledger actor on Ray (None without a budget or a run)."""
        from privatize.synthesis.client import ledger_name

        st = self.settings
        if self.context.run is None or (st.max_requests is None and st.max_tokens is None):
            return None
        return ledger_name(self.context.run, st.model_dump_json())

    def budget(self) -> tuple[str, int | None, int | None] | None:
        """(ledger name, max_requests, max_tokens); None when unbudgeted."""
        name = self.ledger_name()
        return None if name is None else (name, self.settings.max_requests, self.settings.max_tokens)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_client", None)
        return state

    def _ask(self, asks: list[tuple[int, str]], stats: list[dict]) -> list[str]:
        """Answers to (article, prompt) pairs, all at once (concurrently); counts them."""
        if not asks:
            return []
        answers = self._client.complete([prompts.messages(p) for _, p in asks])
        for (i, _), a in zip(asks, answers):
            s = stats[i]
            s["requests"] += 1
            s["requests_cached"] += int(a.cached)
            s["tokens_in"] += a.tokens_in
            s["tokens_out"] += a.tokens_out
        return [a.text for a in answers]

    def process_batch(self, batch: pa.Table) -> pa.Table:
        if self._client is None:
            self.setup()
        st = self.settings
        rows = batch.to_pylist()
        live = [i for i, r in enumerate(rows) if isinstance(r.get("text"), str) and r["text"].strip()]
        names = ("requests", "requests_cached", "tokens_in", "tokens_out", "score_missing", "score_out_of_range",
                 "edges", "tuples", "filtered_empty", "filtered_format", "filtered_entities", "samples",
                 "source_words", "synthetic_words")
        stats = [dict.fromkeys(names, 0) for _ in rows]
        title = {i: _title(rows[i]) for i in live}
        text = {i: rows[i]["text"] for i in live}
        mentions = {i: [m.group(0) for m in ENTITY_TOKEN_RE.finditer(text[i])] for i in live}
        if st.llm_entities:
            asks = [(i, prompts.ENTITIES.format(limit=st.max_entities, title=title[i], article=text[i])) for i in live]
            for (i, _), a in zip(asks, self._ask(asks, stats)):
                # an entity the article does not contain is the model's invention: not kept
                mentions[i] += [e for e in prompts.parse_entities(a, st.max_entities) if e in text[i]]
        entities = {i: graph.rank_entities(mentions[i], st.max_entities) for i in live}
        samples: dict[int, list[tuple[str, tuple[str, ...], str]]] = {i: [] for i in live}
        if st.descriptions:
            asks, what = [], []
            for i in live:
                for e in entities[i]:
                    asks.append((i, prompts.DESCRIPTION.format(entity=e, title=title[i], article=text[i])))
                    what.append((i, (e,)))
            for (i, ents), a in zip(what, self._ask(asks, stats)):
                samples[i].append(("description", ents, a))
        asks, pairs = [], []
        for i in live:
            sentences = _sentences_of(text[i], entities[i]) if st.sentence_window is not None else None
            for a, b in graph.candidate_pairs(entities[i], sentences, st.sentence_window):
                asks.append((i, prompts.ASSOCIATION.format(title=title[i], e1=a, e2=b, article=text[i])))
                pairs.append((i, (a, b)))
        scores: dict[int, dict] = {i: {} for i in live}
        for (i, pair), a in zip(pairs, self._ask(asks, stats)):
            s = graph.parse_score(a)
            if s.value is None:
                stats[i][f"score_{s.problem}"] += 1
            else:
                scores[i][pair] = s.value
        asks, what = [], []
        for i in live:
            edges = graph.kept_edges(scores[i], st.threshold)
            tuples = graph.tuples(entities[i], edges, st.max_k)
            stats[i]["edges"], stats[i]["tuples"] = len(edges), len(tuples)
            for t in tuples:
                listed = ", ".join(t)
                for kind, template in (("qa", prompts.QA), ("relation", prompts.RELATION)):
                    asks.append((i, template.format(entities=listed, title=title[i], article=text[i])))
                    what.append((i, kind, t))
        for (i, kind, t), a in zip(what, self._ask(asks, stats)):
            samples[i].append((kind, t, a))
        return self._rows(batch, rows, live, samples, stats)

    def _rows(self, batch, rows, live, samples, stats) -> pa.Table:
        st = self.settings
        out = []
        for i, r in enumerate(rows):
            src = dict(r)
            if i not in samples:
                src[QUARANTINE] = NO_TEXT
                out.append((src, stats[i]))
                continue
            stats[i]["source_words"] = _words(r["text"])
            if not st.keep_source:
                src[DROP] = SYNTHESIZED
            out.append((src, stats[i]))
            n = 0
            for kind, ents, text in samples[i]:
                why = prompts.problem(kind, text, ents)
                if why:
                    stats[i][f"filtered_{why}"] += 1
                    continue
                if n >= MAX_SAMPLES:
                    raise ValueError(f"synthesize: article {r['doc_id']!r} made over {MAX_SAMPLES} samples; lower "
                                     "max_entities or max_k")
                n += 1
                stats[i]["samples"] += 1
                stats[i]["synthetic_words"] += _words(text)
                out.append(({**r, "doc_id": f"{r['doc_id']}/syn-{n:05d}", "text": text.strip(), "_seg": n,
                             "synthesis_source": r["doc_id"], "synthesis_prompt": kind,
                             "synthesis_entities": list(ents)}, None))
        result = pa.table({c: pa.array([row.get(c) for row, _ in out], batch.schema.field(c).type)
                           for c in batch.column_names})
        for c, t in (("synthesis_source", pa.string()), ("synthesis_prompt", pa.string()),
                     ("synthesis_entities", pa.list_(pa.string()))):
            result = set_column(result, c, pa.array([row.get(c) for row, _ in out], t))
        for c in (QUARANTINE, DROP):
            vals = [row.get(c) for row, _ in out]
            if any(v is not None for v in vals):
                result = set_column(result, c, pa.array(vals, pa.string()))
        for name in stats[0] if stats else ():
            result = set_column(result, f"_stat.{name}", pa.array([s[name] if s else 0 for _, s in out], pa.int64()))
        return result

    def key_ids(self) -> dict[str, str]:
        return {}


def _meta(raw) -> dict:
    if isinstance(raw, str) and raw:
        try:
            v = json.loads(raw)
            return v if isinstance(v, dict) else {}
        except ValueError:
            return {}
    return {}


def _title(row: dict) -> str:
    t = _meta(row.get("meta")).get("title")
    return str(t) if t else str(row.get("doc_id"))


def _sentences_of(text: str, entities: list[str]) -> dict[str, set[int]]:
    """Each entity's sentence numbers in ``text``."""
    out: dict[str, set[int]] = {e: set() for e in entities}
    for n, sent in enumerate(_SENTENCE_END.split(text)):
        for e in entities:
            if e in sent:
                out[e].add(n)
    return out
