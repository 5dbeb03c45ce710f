"""Perplexity on held-out text, optionally split by the secrets' spans (the utility side of
every privacy figure, and the cost of protection against the unprotected model)."""

from __future__ import annotations

import math
from typing import Annotated, Optional

from pydantic import Field

from attacks.data import read_texts, read_texts_with_spans
from attacks.registry import Attack, AttackSettings, Context, Target, register_attack
from attacks.report_format import cost_of_protection, esc
from attacks.results import PerplexityResult
from privatize.policy import DataSource, Quota


class PerplexitySettings(AttackSettings):
    data: Annotated[str, DataSource()]
    text_column: str = "text"
    limit: Annotated[int, Quota("eval_max_examples")] = Field(500, ge=1, le=1_000_000)
    spans_column: Optional[str] = Field(None, min_length=1, max_length=64, description=(
        "a column of character spans ({start, end}: gold or detected secrets) in the held-out records: the "
        "result adds the perplexity on the tokens outside every span (the text around the secrets, which "
        "protection should keep) and on the tokens that overlap one (the secrets, which it is meant not to "
        "learn)"))


@register_attack
class Perplexity(Attack):
    name, title, Settings, Result = "perplexity", "Perplexity", PerplexitySettings, PerplexityResult
    order, section = 10, True

    def prepare(self, p: PerplexitySettings, ctx: Context) -> tuple[list[str], list | None]:
        if p.spans_column is None:
            return read_texts(p.data, column=p.text_column, limit=p.limit, what="perplexity.data"), None
        return read_texts_with_spans(p.data, column=p.text_column, spans_column=p.spans_column, limit=p.limit,
                                     what="perplexity.data")

    def run(self, p: PerplexitySettings, model: Target, prepared: tuple[list[str], list | None]) -> PerplexityResult:
        texts, spans = prepared
        data = f"{len(texts)} texts of {p.data}"
        if spans is None:
            return PerplexityResult(model.adapter.perplexity(texts, batch_tokens=model.scoring.batch_tokens), data)
        from attacks.metrics import span_perplexity

        scores = model.adapter.token_scores(texts, batch_tokens=model.scoring.batch_tokens)
        total = sum(float(s.logprobs.sum()) for s in scores)
        n = sum(len(s.logprobs) for s in scores)
        split = span_perplexity([s.logprobs for s in scores], model.adapter.offsets(texts), spans)
        return PerplexityResult(math.exp(-total / max(1, n)), data, split)

    def card(self, p: PerplexityResult | None, model, reference) -> list[tuple[str, str]]:
        if p is None:
            text = '<span class="absent">not measured</span>'
        else:
            where = esc(p.data) if p.data else "data not recorded"
            text = f"{p.perplexity:.2f} <span class=\"hint\">on {where}</span>"
            sp = p.spans
            if sp is not None:
                on = "no token" if sp.inside is None else f"{sp.inside:.2f}"
                text += (f"<br>outside the secrets' spans <b>{sp.outside:.2f}</b>; on them {on} "
                         f"<span class=\"hint\">({sp.inside_tokens:,} of {sp.tokens:,} tokens)</span>")
        return [("Perplexity", text), ("Cost of protection", esc(cost_of_protection(model, reference)))]
