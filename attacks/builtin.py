"""The papers' attacks, registered as any attack is (:mod:`attacks.registry`), one class
each, in the order an evaluation runs them: perplexity, canary exposure, membership
inference, extraction, name reconstruction, true-prefix, entity tokens in generations,
paper 003's identifier metrics.

Their settings are the config's sections of the same names (``attacks.config``); their
results are typed fields of ``attacks.results.ModelResult`` (``result_fields``), which
the report's cards, comparison and plots show. Errors name the section's fields
(``mia.members: ...``) wherever the attack is configured.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from attacks.config import (CanarySpec, CipherOutputsSpec, ExtractionSpec, IdentifiersSpec, MiaSpec, PerplexitySpec,
                            ReconstructionSpec, TruePrefixSpec)
from attacks.data import read_identifier_records, read_texts, read_texts_with_spans
from attacks.registry import Attack, Context, Target, register_attack
from attacks.scoring import progress_bar, score
from privatize.errors import SpecError


def _key(ref: str, base_dir: str | None, expect: tuple[str, ...], field: str):
    from privatize.keys import KeyMaterialError, KeyResolver

    try:
        return KeyResolver(base_dir=base_dir).resolve(ref, expect=expect)
    except KeyMaterialError as exc:
        raise SpecError(f"{field}: {exc}") from None


@register_attack
class Perplexity(Attack):
    name, title, Settings = "perplexity", "Perplexity", PerplexitySpec
    result_fields = ("perplexity", "perplexity_data", "perplexity_spans")

    def prepare(self, p: PerplexitySpec, ctx: Context) -> tuple[list[str], list | None]:
        if p.spans_column is None:
            return read_texts(p.data, column=p.text_column, limit=p.limit, what="perplexity.data"), None
        return read_texts_with_spans(p.data, column=p.text_column, spans_column=p.spans_column, limit=p.limit,
                                     what="perplexity.data")

    def run(self, p: PerplexitySpec, model: Target, prepared: tuple[list[str], list | None]) -> dict:
        texts, spans = prepared
        out = {"perplexity_data": f"{len(texts)} texts of {p.data}", "perplexity_spans": None}
        if spans is None:
            return {**out, "perplexity": model.adapter.perplexity(texts, batch_tokens=model.scoring.batch_tokens)}
        from attacks.metrics import span_perplexity

        scores = model.adapter.token_scores(texts, batch_tokens=model.scoring.batch_tokens)
        total = sum(float(s.logprobs.sum()) for s in scores)
        n = sum(len(s.logprobs) for s in scores)
        split = span_perplexity([s.logprobs for s in scores], model.adapter.offsets(texts), spans)
        return {**out, "perplexity": math.exp(-total / max(1, n)), "perplexity_spans": split}


def canary_secrets(c: CanarySpec, base_dir: str | None = None) -> list[str]:
    """Inserted secrets then held-out ones, derived from the canary key (never stored)."""
    from privatize.stages.canaries import derive_secrets

    km = _key(c.key, base_dir, ("hmac",), "canaries.key")
    return derive_secrets(km.secret, c.digits, c.count + c.held_out, c.seed_label)


@register_attack
class Canaries(Attack):
    name, title, Settings = "canaries", "Canary exposure", CanarySpec
    result_fields = ("exposure",)

    def prepare(self, c: CanarySpec, ctx: Context) -> list[str]:
        return canary_secrets(c, ctx.base_dir)

    def run(self, c: CanarySpec, model: Target, secrets: list[str]) -> dict:
        from attacks.exposure import canary_exposure

        repeats = [c.repeats] * c.count + [0] * c.held_out
        total = 10 ** c.digits if c.method == "exact" else min(c.sample, 10 ** c.digits)
        with progress_bar(total, f"{model.name}: canary exposure", model.progress) as bar:
            return {"exposure": canary_exposure(model.adapter, c.format, c.digits, secrets, repeats, method=c.method,
                                                sample=c.sample, progress=bar.update)}


@register_attack
class Mia(Attack):
    name, title, Settings = "mia", "Membership inference", MiaSpec
    result_fields = ("mia",)

    def prepare(self, m: MiaSpec, ctx: Context) -> dict:
        if m.reference:
            from attacks.model import checkpoint_dir

            try:
                checkpoint_dir(m.reference)
            except SpecError as exc:
                raise SpecError(f"mia.reference: {exc}") from None
        members = read_texts(m.members, column=m.text_column, limit=m.limit, seed=m.seed, what="mia.members")
        non = read_texts(m.non_members, column=m.text_column, limit=m.limit, seed=m.seed + 1, what="mia.non_members")
        return {"members": [m.context.format(text=t) for t in members],
                "non_members": [m.context.format(text=t) for t in non]}

    def run(self, m: MiaSpec, model: Target, inputs: dict) -> dict:
        from attacks.mia import example_scores, mia_result

        mem, non = inputs["members"], inputs["non_members"]
        if m.reference and "reference_scores" not in inputs:  # once per evaluation
            inputs["reference_scores"], _ = score(m.reference, mem + non, model.scoring, model.progress,
                                                  "reference scoring")
        ref = inputs.get("reference_scores")
        scores, pids = score(model.path, mem + non, model.scoring, model.progress, "MIA scoring", model.adapter)
        model.pids |= pids
        ref_m, ref_n = (None, None) if ref is None else (ref[: len(mem)], ref[len(mem):])
        sm = example_scores(mem, scores[: len(mem)], k=m.k, reference_scores=ref_m)
        sn = example_scores(non, scores[len(mem):], k=m.k, reference_scores=ref_n)
        ctx = "the whole text" if m.context == "{text}" else f"in the context {m.context!r}"
        return {"mia": mia_result(sm, sn, context=ctx, group_size=m.group_size, seed=m.seed)}


@register_attack
class Extraction(Attack):
    name, title, Settings = "extraction", "Training data extraction", ExtractionSpec
    result_fields = ("extraction",)

    def prepare(self, e: ExtractionSpec, ctx: Context) -> dict:
        from attacks.extraction import TrainingIndex

        prompts = read_texts(e.prompts, column=e.text_column, what="extraction.prompts")
        training = read_texts(e.training_data, column=e.text_column, what="extraction.training_data")
        return {"prompt_text": prompts, "index": TrainingIndex.build(training)}

    def run(self, e: ExtractionSpec, model: Target, inputs: dict) -> dict:
        from attacks.extraction import extraction_result

        adapter, texts = model.adapter, inputs["prompt_text"]
        rng = np.random.default_rng(e.seed)
        prompts = []
        for _ in range(e.count):
            ids = adapter.tok(texts[int(rng.integers(len(texts)))], add_special_tokens=False)["input_ids"]
            start = int(rng.integers(max(1, len(ids) - e.prompt_tokens)))
            prompts.append(adapter.tok.decode(ids[start: start + e.prompt_tokens]))
        gens = [g[0] for g in adapter.generate(prompts, samples=1, max_new_tokens=e.max_new_tokens, seed=e.seed)]
        return {"extraction": extraction_result([p + g for p, g in zip(prompts, gens)], inputs["index"],
                                                min_words=e.min_words, zlib_threshold=e.zlib_threshold)}


def _trials(spec, section: str, n: int, cache: dict, min_s1_words: int = 0) -> list:
    """Name trials from records with gold spans (records read once per evaluation)."""
    from attacks.reconstruction import name_trials, read_records

    key = ("records", spec.data, spec.text_column)
    if key not in cache:
        cache[key] = read_records(spec.data, text_column=spec.text_column, what=f"{section}.data")
    trials = name_trials(cache[key], n, spec.seed, entity_type=spec.entity_type, context=spec.context,
                         max_context_chars=spec.max_context_chars, following_turns=spec.following_turns,
                         min_s1_words=min_s1_words)
    if not trials:
        more = f" with at least {min_s1_words} word(s) after the name in S1" if min_s1_words else ""
        raise SpecError(f"{section}.data: {spec.data} has no usable {spec.entity_type} span{more} (spans whose "
                        "name also occurs in S0 or S1 are skipped)")
    return trials


@register_attack
class Reconstruction(Attack):
    name, title, Settings = "reconstruction", "Name reconstruction", ReconstructionSpec
    result_fields = ("reconstruction",)

    def prepare(self, r: ReconstructionSpec, ctx: Context) -> dict:
        """The trials, and candidate names checked to leave every trial ``n_candidates - 1``
        others."""
        from attacks.reconstruction import candidate_pool

        trials = _trials(r, "reconstruction", r.trials, ctx.cache)
        pool = candidate_pool(read_texts(r.candidates, column=r.text_column, what="reconstruction.candidates"))
        names = set(pool)
        fewest = min(len(pool) - (t.name in names) for t in trials)
        if fewest < r.n_candidates - 1:
            raise SpecError(f"reconstruction.n_candidates: {r.n_candidates} candidates per trial need "
                            f"{r.n_candidates - 1} names besides the true one; {r.candidates} leaves {fewest}")
        return {"trials": trials, "candidates": pool}

    def run(self, r: ReconstructionSpec, model: Target, inputs: dict) -> dict:
        from attacks.reconstruction import name_reconstruction

        trials = inputs["trials"]
        with progress_bar(len(trials), f"{model.name}: name reconstruction", model.progress) as bar:
            return {"reconstruction": name_reconstruction(model.adapter, trials, inputs["candidates"],
                                                          r.n_candidates, r.seed,
                                                          batch_tokens=model.scoring.batch_tokens,
                                                          progress=bar.update)}


@register_attack
class TruePrefix(Attack):
    name, title, Settings = "true_prefix", "True-prefix reconstruction", TruePrefixSpec
    result_fields = ("true_prefix",)

    def prepare(self, t: TruePrefixSpec, ctx: Context) -> dict:
        from attacks.similarity import DEFAULT_MODEL, load_nlp

        trials = _trials(t, "true_prefix", t.trials, ctx.cache, t.min_s1_words)
        try:
            nlp = load_nlp()
        except OSError:
            raise SpecError(f"true_prefix: the spaCy model {DEFAULT_MODEL} (content words) is not installed") from None
        return {"trials": trials, "nlp": nlp}

    def run(self, t: TruePrefixSpec, model: Target, inputs: dict) -> dict:
        from attacks.reconstruction import true_prefix

        return {"true_prefix": true_prefix(model.adapter, inputs["trials"], t.samples, t.seed, t.max_new_tokens,
                                           top_k=t.top_k, nlp=inputs["nlp"])}


def _training_pii(c: CipherOutputsSpec) -> list[str]:
    """Plaintext PII values: a .txt list, or the gold span texts of .jsonl records."""
    if Path(c.training_pii).suffix == ".txt":
        return read_texts(c.training_pii, what="cipher_outputs.training_pii")
    from attacks.reconstruction import read_records

    records = read_records(c.training_pii, text_column=c.text_column, what="cipher_outputs.training_pii")
    values = sorted({r["text"][s["start"]:s["end"]] for r in records for s in r["spans"]})
    if not values:
        raise SpecError(f"cipher_outputs.training_pii: {c.training_pii} has no gold spans")
    return values


@register_attack
class CipherOutputs(Attack):
    name, title, Settings = "cipher_outputs", "Entity tokens in generations", CipherOutputsSpec
    result_fields = ("cipher_outputs",)

    def prepare(self, c: CipherOutputsSpec, ctx: Context) -> dict:
        """The entity stage's key (aes-siv, or aes-ecb when reproducing the paper) that
        generated entity tokens are checked under, the prompts, the training set's PII."""
        key = _key(c.key, ctx.base_dir, ("aes-siv", "aes-ecb"), "cipher_outputs.key")
        prompts = read_texts(c.prompts, column=c.text_column, limit=c.count, seed=c.seed,
                             what="cipher_outputs.prompts")
        return {"key": key, "prompts": prompts, "training_pii": _training_pii(c) if c.training_pii else []}

    def run(self, c: CipherOutputsSpec, model: Target, inputs: dict) -> dict:
        from attacks.cipher_outputs import cipher_outputs

        adapter, prompts = model.adapter, inputs["prompts"]
        if c.prompt_tokens:
            prompts = [adapter.tok.decode(adapter.tok(p, add_special_tokens=False)["input_ids"][: c.prompt_tokens])
                       for p in prompts]
        gens = adapter.generate(prompts, samples=c.samples, max_new_tokens=c.max_new_tokens, seed=c.seed)
        # only the new text: a prompt cut from the data may hold genuine tokens or PII itself
        return {"cipher_outputs": cipher_outputs([g for gs in gens for g in gs], inputs["key"],
                                                 inputs["training_pii"])}


@register_attack
class Identifiers(Attack):
    name, title, Settings = "identifiers", "Identifiers (paper 003)", IdentifiersSpec
    result_fields = ("identifiers",)

    def prepare(self, s: IdentifiersSpec, ctx: Context) -> dict:
        """The members' records and, when given, the held-out individuals' (none of whom
        may be a member: the membership inferences score individuals)."""
        out = {"settings": s.settings(),
               "members": read_identifier_records(s.members, limit=s.limit, seed=s.seed, what="identifiers.members"),
               "non_members": []}
        if s.non_members:
            non = read_identifier_records(s.non_members, limit=s.limit, seed=s.seed + 1,
                                          what="identifiers.non_members")
            both = {r.individual for r in out["members"]} & {r.individual for r in non}
            if both:
                raise SpecError(f"identifiers.non_members: {len(both)} of its individuals are also in "
                                "identifiers.members (non-members must be held-out individuals, pseudonymised "
                                "under the same output.pseudonym_key)")
            out["non_members"] = non
        return out

    def run(self, s: IdentifiersSpec, model: Target, inputs: dict) -> dict:
        """Privacy over the members' records (teacher-forced predictions and ``samples``
        generations each); with non-members, both membership inferences per individual
        over everyone's records (predictions only: the members' are the ones made)."""
        from attacks.identifiers import Leaks, Record, leaks, loss_mia, low_cost_mia, privacy
        from attacks.results import IdentifierLeakage

        st, members, non = inputs["settings"], inputs["members"], inputs["non_members"]
        found = leaks(model.adapter, members, st, samples=s.samples, prompt_chars=s.prompt_chars,
                      max_new_tokens=s.max_new_tokens, seed=s.seed)
        who = {r.individual for r in members}
        res = IdentifierLeakage(records=len(members), individuals=len(who), samples=s.samples,
                                privacy=privacy(members, found, st))
        if non:
            held = leaks(model.adapter, non, st, samples=0)
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
        return {"identifiers": res}
