"""Training data extraction (Carlini et al. 2021): generations from short public prompts that
share a long run of words with the training data (a suffix array over word ids)."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from attacks.data import read_texts
from attacks.registry import Attack, AttackSettings, Context, Target, register_attack
from attacks.report_format import esc, fmt_num
from attacks.results import ExtractionResult
from privatize.policy import DataSource, Quota


class ExtractionSettings(AttackSettings):
    prompts: Annotated[str, DataSource()] = Field(description="public text the 5-token prompts are cut from "
                                                               "(e.g. wikitext)")
    training_data: Annotated[str, DataSource()] = Field(description="the training texts generations are matched "
                                                                     "against")
    text_column: str = "text"
    count: Annotated[int, Quota("eval_max_examples")] = Field(200, ge=1, le=1_000_000)
    prompt_tokens: int = Field(5, ge=1, le=64)
    max_new_tokens: int = Field(64, ge=8, le=1024)
    min_words: int = Field(35, ge=5, le=1000)
    zlib_threshold: float = Field(0.275, ge=0, le=1)
    seed: int = 0


@register_attack
class Extraction(Attack):
    name, title, Settings, Result = "extraction", "Training data extraction", ExtractionSettings, ExtractionResult
    order, section = 60, True

    def prepare(self, e: ExtractionSettings, ctx: Context) -> dict:
        from attacks.extraction import TrainingIndex

        prompts = read_texts(e.prompts, column=e.text_column, what="extraction.prompts")
        training = read_texts(e.training_data, column=e.text_column, what="extraction.training_data")
        return {"prompt_text": prompts, "index": TrainingIndex.build(training)}

    def run(self, e: ExtractionSettings, model: Target, inputs: dict) -> ExtractionResult:
        from attacks.extraction import extraction_result

        adapter, texts = model.adapter, inputs["prompt_text"]
        rng = np.random.default_rng(e.seed)
        prompts = []
        for _ in range(e.count):
            ids = adapter.tok(texts[int(rng.integers(len(texts)))], add_special_tokens=False)["input_ids"]
            start = int(rng.integers(max(1, len(ids) - e.prompt_tokens)))
            prompts.append(adapter.tok.decode(ids[start: start + e.prompt_tokens]))
        gens = [g[0] for g in adapter.generate(prompts, samples=1, max_new_tokens=e.max_new_tokens, seed=e.seed)]
        return extraction_result([p + g for p, g in zip(prompts, gens)], inputs["index"],
                                 min_words=e.min_words, zlib_threshold=e.zlib_threshold)

    def card(self, x: ExtractionResult | None, model, reference) -> list[tuple[str, str]]:
        if x is None:
            return [("Extraction", '<span class="absent">not run</span>')]
        text = (f"<b>{x.extracted:,}</b> of {x.prompts:,} generations share ≥ {x.min_words} words with the "
                f"training data <span class=\"hint\">({x.unique_extracted:,} unique; {x.dropped_low_zlib:,} "
                f"dropped under zlib threshold {fmt_num(x.zlib_threshold)})</span>")
        if x.examples:
            items = "".join(f"<li><code>{esc(s)}</code></li>" for s in x.examples)
            n = len(x.examples)
            text += f"<details><summary>{n} example{'s' if n != 1 else ''}</summary><ul>{items}</ul></details>"
        return [("Extraction", text)]
