"""Run an evaluation: every configured attack against every model, one report.

``run_evaluation(cfg)`` checks everything it can before it writes (model folders, data
sources, the canary and entity keys), then the corpus statistics, then per model:
perplexity on held-out text, canary exposure, membership inference (scoring spread over
Ray workers when ``scoring.workers`` > 0), data extraction, name reconstruction,
true-prefix, entity tokens in generations, paper 003's identifier metrics; and writes
``OUTPUT/evaluation.json`` and ``OUTPUT/report.html``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from attacks.config import AttackConfig
from attacks.data import read_identifier_records, read_texts
from attacks.registry import jsonable, prepare_all
from attacks.results import Evaluation, IdentifierLeakage, ModelResult, training_info
from privatize.errors import SpecError


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="ex", file=sys.stderr, disable=not enabled, leave=False,
                dynamic_ncols=True)


def canary_secrets(cfg: AttackConfig, base_dir: str | None = None) -> list[str]:
    """Inserted secrets then held-out ones, derived from the canary key (never stored)."""
    from privatize.keys import KeyMaterialError, KeyResolver
    from privatize.stages.canaries import derive_secrets

    c = cfg.canaries
    try:
        km = KeyResolver(base_dir=base_dir).resolve(c.key, expect=("hmac",))
    except KeyMaterialError as exc:
        raise SpecError(f"canaries.key: {exc}") from None
    return derive_secrets(km.secret, c.digits, c.count + c.held_out, c.seed_label)


def entity_key(cfg: AttackConfig, base_dir: str | None = None):
    """The entity stage's key (aes-siv, or aes-ecb when reproducing the paper) that
    generated entity tokens are checked under."""
    from privatize.keys import KeyMaterialError, KeyResolver

    try:
        return KeyResolver(base_dir=base_dir).resolve(cfg.cipher_outputs.key, expect=("aes-siv", "aes-ecb"))
    except KeyMaterialError as exc:
        raise SpecError(f"cipher_outputs.key: {exc}") from None


def _trials(spec, section: str, n: int, records_cache: dict, min_s1_words: int = 0) -> list:
    from attacks.reconstruction import name_trials, read_records

    key = (spec.data, spec.text_column)
    if key not in records_cache:
        records_cache[key] = read_records(spec.data, text_column=spec.text_column, what=f"{section}.data")
    trials = name_trials(records_cache[key], n, spec.seed, entity_type=spec.entity_type, context=spec.context,
                         max_context_chars=spec.max_context_chars, following_turns=spec.following_turns,
                         min_s1_words=min_s1_words)
    if not trials:
        more = f" with at least {min_s1_words} word(s) after the name in S1" if min_s1_words else ""
        raise SpecError(f"{section}.data: {spec.data} has no usable {spec.entity_type} span{more} (spans whose "
                        "name also occurs in S0 or S1 are skipped)")
    return trials


def _candidates(cfg: AttackConfig, trials: list) -> list[str]:
    """The candidate names, checked to leave every trial ``n_candidates - 1`` others."""
    from attacks.reconstruction import candidate_pool

    r = cfg.reconstruction
    pool = candidate_pool(read_texts(r.candidates, column=r.text_column, what="reconstruction.candidates"))
    names = set(pool)
    fewest = min(len(pool) - (t.name in names) for t in trials)
    if fewest < r.n_candidates - 1:
        raise SpecError(f"reconstruction.n_candidates: {r.n_candidates} candidates per trial need "
                        f"{r.n_candidates - 1} names besides the true one; {r.candidates} leaves {fewest}")
    return pool


def _training_pii(c) -> list[str]:
    """Plaintext PII values: a .txt list, or the gold span texts of .jsonl records."""
    if Path(c.training_pii).suffix == ".txt":
        return read_texts(c.training_pii, what="cipher_outputs.training_pii")
    from attacks.reconstruction import read_records

    records = read_records(c.training_pii, text_column=c.text_column, what="cipher_outputs.training_pii")
    values = sorted({r["text"][s["start"]:s["end"]] for r in records for s in r["spans"]})
    if not values:
        raise SpecError(f"cipher_outputs.training_pii: {c.training_pii} has no gold spans")
    return values


def _corpus_texts(cfg: AttackConfig) -> dict[str, list]:
    """Each corpus' texts, or token id lists for unit token (the named tokenizer, else
    the first model's)."""
    from attacks.model import checkpoint_dir

    s = cfg.corpus_stats
    out = {name: read_texts(src, column=s.text_column, limit=s.limit, what=f"corpus_stats.sources.{name}")
           for name, src in s.sources.items()}
    if s.unit == "token":
        from train.tokenizer import load_tokenizer

        what = "corpus_stats.tokenizer" if s.tokenizer else "models.0.path"
        path = s.tokenizer or cfg.models[0].path
        try:
            folder = str(checkpoint_dir(path))
        except SpecError:
            folder = path  # a bare tokenizer folder
        tok = load_tokenizer(folder, what=what)
        out = {name: tok(texts, add_special_tokens=False)["input_ids"] for name, texts in out.items()}
    return out


def corpus_stats(cfg: AttackConfig, corpora: dict[str, list]) -> dict:
    from attacks.corpus_stats import ngram_entropies

    stats = {}
    for name, texts in corpora.items():
        try:
            stats[name] = ngram_entropies(texts, unit=cfg.corpus_stats.unit, max_n=cfg.corpus_stats.max_n)
        except ValueError as exc:
            raise SpecError(f"corpus_stats.sources.{name}: {exc}") from None
    return stats


def _score(model_path: str, texts: list[str], cfg: AttackConfig, progress: bool, desc: str, adapter=None):
    """Per-token scores of ``texts``: in this process (with ``adapter`` when the caller
    has the model loaded already), or on ``scoring.workers`` Ray actors."""
    from attacks.model import ModelAdapter

    if cfg.scoring.workers == 0:
        adapter = adapter or ModelAdapter.load(model_path)
        with _progress(len(texts), desc, progress) as bar:
            return adapter.token_scores(texts, batch_tokens=cfg.scoring.batch_tokens, progress=bar.update), {os.getpid()}
    return score_on_ray(model_path, texts, workers=cfg.scoring.workers, batch_tokens=cfg.scoring.batch_tokens)


class _Scorer:
    """Ray Data actor: loads the model once, scores batches of texts."""

    def __init__(self, model_path: str, batch_tokens: int):
        import torch

        from attacks.model import ModelAdapter

        torch.set_num_threads(1)  # one CPU per actor: the actors are the parallelism
        self.adapter = ModelAdapter.load(model_path)
        self.batch_tokens = batch_tokens

    def __call__(self, batch):
        texts = batch.column("text").to_pylist()
        got = self.adapter.token_scores(texts, batch_tokens=self.batch_tokens)
        return pa_table_of_scores(batch.column("i"), got, os.getpid())


def pa_table_of_scores(index, scores, pid: int):
    """Scores as Arrow list columns built from flat numpy arrays (no Python floats)."""
    import pyarrow as pa

    offsets = pa.array(np.concatenate([[0], np.cumsum([len(s.logprobs) for s in scores])]).astype(np.int32))

    def col(name: str):
        flat = np.concatenate([getattr(s, name) for s in scores]) if scores else np.zeros(0)
        return pa.ListArray.from_arrays(offsets, pa.array(flat.astype(np.float32)))

    return pa.table({"i": index, "logprobs": col("logprobs"), "mu": col("mu"), "sigma": col("sigma"),
                     "pid": pa.array([pid] * len(scores), pa.int64())})


def score_on_ray(model_path: str, texts: list[str], *, workers: int, batch_tokens: int = 16384):
    """Score ``texts`` on ``workers`` Ray Data actors; returns (scores in input order, pids)."""
    import pyarrow as pa
    import ray

    from attacks.model import TokenScores
    from privatize.ray.cluster import connect

    connect()
    ds = ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(texts)],
                             override_num_blocks=max(1, min(len(texts), workers * 4)))
    # at least four batches per worker, so every actor gets a share once loaded
    batch = max(1, min(64, -(-len(texts) // (workers * 4))))
    # the model folder is a path the actors read, never key material
    ds = ds.map_batches(_Scorer, fn_constructor_args=(str(model_path), batch_tokens), batch_size=batch,
                        batch_format="pyarrow", num_cpus=1,
                        compute=ray.data.ActorPoolStrategy(min_size=workers, max_size=workers))
    tables = [t for t in ray.get(ds.to_arrow_refs()) if t.num_rows]
    table = pa.concat_tables(tables).combine_chunks() if tables else None
    out: list = [None] * len(texts)
    pids: set[int] = set()
    if table is not None:
        cols = {}
        for name in ("logprobs", "mu", "sigma"):
            arr = table.column(name).chunk(0)
            cols[name] = (arr.offsets.to_numpy(), arr.values.to_numpy(zero_copy_only=False))
        for r, i in enumerate(table.column("i").to_numpy()):
            parts = [vals[offs[r]: offs[r + 1]] for offs, vals in (cols["logprobs"], cols["mu"], cols["sigma"])]
            out[int(i)] = TokenScores(*parts)
        pids = set(table.column("pid").to_pylist())
    return out, pids


def prepare(cfg: AttackConfig, base_dir: str | None = None) -> dict:
    """Every check that can fail, before anything is written: models, data, keys."""
    from attacks.model import checkpoint_dir

    for i, m in enumerate(cfg.models):
        try:
            checkpoint_dir(m.path)
        except SpecError as exc:
            raise SpecError(f"models.{i}.path: {exc}") from None
    if cfg.mia and cfg.mia.reference:
        try:
            checkpoint_dir(cfg.mia.reference)
        except SpecError as exc:
            raise SpecError(f"mia.reference: {exc}") from None
    inputs: dict = {}
    if cfg.canaries:
        inputs["secrets"] = canary_secrets(cfg, base_dir)
    if cfg.mia:
        m = cfg.mia
        inputs["members"] = read_texts(m.members, column=m.text_column, limit=m.limit, seed=m.seed, what="mia.members")
        inputs["non_members"] = read_texts(m.non_members, column=m.text_column, limit=m.limit, seed=m.seed + 1,
                                           what="mia.non_members")
    if cfg.perplexity:
        p = cfg.perplexity
        inputs["heldout"] = read_texts(p.data, column=p.text_column, limit=p.limit, what="perplexity.data")
    if cfg.extraction:
        e = cfg.extraction
        inputs["prompt_text"] = read_texts(e.prompts, column=e.text_column, what="extraction.prompts")
        inputs["training_texts"] = read_texts(e.training_data, column=e.text_column, what="extraction.training_data")
    records: dict = {}
    if cfg.reconstruction:
        r = cfg.reconstruction
        inputs["reconstruction_trials"] = _trials(r, "reconstruction", r.trials, records)
        inputs["candidates"] = _candidates(cfg, inputs["reconstruction_trials"])
    if cfg.true_prefix:
        t = cfg.true_prefix
        inputs["true_prefix_trials"] = _trials(t, "true_prefix", t.trials, records, t.min_s1_words)
        from attacks.similarity import DEFAULT_MODEL, load_nlp

        try:
            inputs["nlp"] = load_nlp()
        except OSError:
            raise SpecError(f"true_prefix: the spaCy model {DEFAULT_MODEL} (content words) is not installed") from None
    if cfg.cipher_outputs:
        c = cfg.cipher_outputs
        inputs["entity_key"] = entity_key(cfg, base_dir)
        inputs["cipher_prompts"] = read_texts(c.prompts, column=c.text_column, limit=c.count, seed=c.seed,
                                              what="cipher_outputs.prompts")
        inputs["training_pii"] = _training_pii(c) if c.training_pii else []
    if cfg.corpus_stats:
        inputs["corpora"] = _corpus_texts(cfg)
    if cfg.identifiers:
        inputs.update(_identifier_records(cfg))
    inputs["registered"] = prepare_all([a.model_dump() for a in cfg.attacks], base_dir)
    return inputs


def _identifier_records(cfg: AttackConfig) -> dict:
    """The members' records and, when given, the held-out individuals' (none of whom may
    be a member: the membership inferences score individuals)."""
    s = cfg.identifiers
    out = {"identifier_settings": s.settings(),
           "identifier_members": read_identifier_records(s.members, limit=s.limit, seed=s.seed,
                                                         what="identifiers.members"),
           "identifier_non_members": []}
    if s.non_members:
        non = read_identifier_records(s.non_members, limit=s.limit, seed=s.seed + 1, what="identifiers.non_members")
        both = {r.individual for r in out["identifier_members"]} & {r.individual for r in non}
        if both:
            raise SpecError(f"identifiers.non_members: {len(both)} of its individuals are also in identifiers.members "
                            "(non-members must be held-out individuals, pseudonymised under the same "
                            "output.pseudonym_key)")
        out["identifier_non_members"] = non
    return out


def _identifiers(cfg: AttackConfig, adapter, inputs: dict) -> IdentifierLeakage:
    """Privacy over the members' records (teacher-forced predictions and ``samples``
    generations each); with non-members, both membership inferences per individual over
    everyone's records (predictions only: the members' are the ones already made)."""
    from attacks.identifiers import Leaks, Record, leaks, loss_mia, low_cost_mia, privacy

    s, st = cfg.identifiers, inputs["identifier_settings"]
    members, non = inputs["identifier_members"], inputs["identifier_non_members"]
    found = leaks(adapter, members, st, samples=s.samples, prompt_chars=s.prompt_chars,
                  max_new_tokens=s.max_new_tokens, seed=s.seed)
    who = {r.individual for r in members}
    res = IdentifierLeakage(records=len(members), individuals=len(who), samples=s.samples,
                            privacy=privacy(members, found, st))
    if non:
        held = leaks(adapter, non, st, samples=0)
        # doc ids may repeat across the two sources: tag them by side
        records = [Record(f"m/{r.doc_id}", r.individual, r.text, r.spans) for r in members] + \
                  [Record(f"n/{r.doc_id}", r.individual, r.text, r.spans) for r in non]
        audit = Leaks()
        for tag, got in (("m/", found), ("n/", held)):
            audit.predicted.update({tag + d: v for d, v in got.predicted.items()})
            audit.loss.update({tag + d: v for d, v in got.loss.items()})
            audit.tokens.update({tag + d: v for d, v in got.tokens.items()})
        res.non_member_records = len(non)
        res.non_member_individuals = len({r.individual for r in non})
        res.low_cost_mia = low_cost_mia(records, audit, who)
        try:
            res.loss_mia = loss_mia(records, audit, who)
        except ValueError:  # every record of one side too short to score: no ROC
            res.loss_mia = None
    return res


def _mia(cfg: AttackConfig, model_path: str, inputs: dict, reference_scores, progress: bool, adapter=None):
    from attacks.mia import example_scores, mia_result

    m = cfg.mia
    mem = [m.context.format(text=t) for t in inputs["members"]]
    non = [m.context.format(text=t) for t in inputs["non_members"]]
    scores, pids = _score(model_path, mem + non, cfg, progress, "MIA scoring", adapter)
    ref_m = ref_n = None
    if reference_scores is not None:
        ref_m, ref_n = reference_scores[: len(mem)], reference_scores[len(mem):]
    sm = example_scores(mem, scores[: len(mem)], k=m.k, reference_scores=ref_m)
    sn = example_scores(non, scores[len(mem):], k=m.k, reference_scores=ref_n)
    ctx = "the whole text" if m.context == "{text}" else f"in the context {m.context!r}"
    return mia_result(sm, sn, context=ctx, group_size=m.group_size, seed=m.seed), pids


def _extraction(cfg: AttackConfig, adapter, inputs: dict, index):
    from attacks.extraction import extraction_result

    e = cfg.extraction
    rng = np.random.default_rng(e.seed)
    prompts = []
    texts = inputs["prompt_text"]
    for _ in range(e.count):
        ids = adapter.tok(texts[int(rng.integers(len(texts)))], add_special_tokens=False)["input_ids"]
        start = int(rng.integers(max(1, len(ids) - e.prompt_tokens)))
        prompts.append(adapter.tok.decode(ids[start: start + e.prompt_tokens]))
    gens = [g[0] for g in adapter.generate(prompts, samples=1, max_new_tokens=e.max_new_tokens, seed=e.seed)]
    return extraction_result([p + g for p, g in zip(prompts, gens)], index, min_words=e.min_words,
                             zlib_threshold=e.zlib_threshold)


def _cipher_outputs(cfg: AttackConfig, adapter, inputs: dict):
    from attacks.cipher_outputs import cipher_outputs

    c = cfg.cipher_outputs
    prompts = inputs["cipher_prompts"]
    if c.prompt_tokens:
        prompts = [adapter.tok.decode(adapter.tok(p, add_special_tokens=False)["input_ids"][: c.prompt_tokens])
                   for p in prompts]
    gens = adapter.generate(prompts, samples=c.samples, max_new_tokens=c.max_new_tokens, seed=c.seed)
    # only the new text: a prompt cut from the data may hold genuine tokens or PII itself
    return cipher_outputs([g for gs in gens for g in gs], inputs["entity_key"], inputs["training_pii"])


def run_evaluation(cfg: AttackConfig, *, base_dir: str | None = None, progress: bool = True,
                   evaluation_id: str | None = None) -> Evaluation:
    """Run ``cfg``; writes OUTPUT/evaluation.json and OUTPUT/report.html."""
    from attacks.exposure import canary_exposure
    from attacks.model import ModelAdapter, checkpoint_dir
    from attacks.report import write_report

    inputs = prepare(cfg, base_dir)
    out = Path(cfg.output)
    ev = Evaluation(id=evaluation_id or uuid.uuid4().hex[:12],
                    created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), models=[])
    ref_scores = None
    if cfg.mia and cfg.mia.reference:
        ref_scores, _ = _score(cfg.mia.reference, [cfg.mia.context.format(text=t) for t in
                                                   inputs["members"] + inputs["non_members"]], cfg, progress,
                               "reference scoring")
    index = None
    if cfg.extraction:
        from attacks.extraction import TrainingIndex

        index = TrainingIndex.build(inputs["training_texts"])
    if cfg.corpus_stats:
        ev.corpus_stats = corpus_stats(cfg, inputs["corpora"])
        ev.notes.append(f"corpus statistics: unigram entropy and n-gram conditional entropies (bits) over "
                        f"{cfg.corpus_stats.unit}s")
    pids: set[int] = set()
    for spec in cfg.models:
        t0 = time.perf_counter()
        path = str(checkpoint_dir(spec.path))
        adapter = ModelAdapter.load(path)
        res = ModelResult(name=spec.name, path=str(Path(spec.path).resolve()),
                          training=training_info(spec.path, spec.protection), reference=spec.reference)
        if cfg.perplexity:
            res.perplexity = adapter.perplexity(inputs["heldout"], batch_tokens=cfg.scoring.batch_tokens)
            res.perplexity_data = f"{len(inputs['heldout'])} texts of {cfg.perplexity.data}"
        if cfg.canaries:
            c = cfg.canaries
            secrets = inputs["secrets"]
            repeats = [c.repeats] * c.count + [0] * c.held_out
            total = 10 ** c.digits if c.method == "exact" else min(c.sample, 10 ** c.digits)
            with _progress(total, f"{spec.name}: canary exposure", progress) as bar:
                res.exposure = canary_exposure(adapter, c.format, c.digits, secrets, repeats, method=c.method,
                                               sample=c.sample, progress=bar.update)
        if cfg.mia:
            res.mia, p = _mia(cfg, path, inputs, ref_scores, progress, adapter)
            pids |= p
        if cfg.extraction:
            res.extraction = _extraction(cfg, adapter, inputs, index)
        if cfg.reconstruction:
            from attacks.reconstruction import name_reconstruction

            r, trials = cfg.reconstruction, inputs["reconstruction_trials"]
            with _progress(len(trials), f"{spec.name}: name reconstruction", progress) as bar:
                res.reconstruction = name_reconstruction(adapter, trials, inputs["candidates"], r.n_candidates,
                                                         r.seed, batch_tokens=cfg.scoring.batch_tokens,
                                                         progress=bar.update)
        if cfg.true_prefix:
            from attacks.reconstruction import true_prefix

            t = cfg.true_prefix
            res.true_prefix = true_prefix(adapter, inputs["true_prefix_trials"], t.samples, t.seed,
                                          t.max_new_tokens, top_k=t.top_k, nlp=inputs["nlp"])
        if cfg.cipher_outputs:
            res.cipher_outputs = _cipher_outputs(cfg, adapter, inputs)
        if cfg.identifiers:
            res.identifiers = _identifiers(cfg, adapter, inputs)
        for attack, settings, prepared in inputs["registered"]:
            res.attacks[attack.name] = jsonable(attack.run(settings, adapter, prepared))
        res.seconds = round(time.perf_counter() - t0, 2)
        ev.models.append(res)
        if progress:
            print(f"privatize: evaluated {spec.name} in {res.seconds:.1f} s", file=sys.stderr)
    if cfg.scoring.workers:
        ev.notes.append(f"membership scoring ran on Ray ({cfg.scoring.workers} workers asked, "
                        f"{len(pids - {os.getpid()})} worker processes took batches)")
    write_report(ev, out)
    return ev
