"""Membership inference on texts (loss, zlib, min-k%, min-k%++, a reference model's ratio;
group inference over summed losses): :mod:`attacks.mia`."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import Field, field_validator

from attacks.data import read_texts
from attacks.registry import Attack, AttackSettings, Context, Target, register_attack
from attacks.report_format import esc, fmt_pct, support_note, tpr_at, tpr_cell
from attacks.results import MiaResult, RocResult
from attacks.scoring import score
from privatize.errors import SpecError
from privatize.policy import DataSource, Quota, ServerPath


class MiaSettings(AttackSettings):
    members: Annotated[str, DataSource()]
    non_members: Annotated[str, DataSource()]
    text_column: str = "text"
    limit: Annotated[int, Quota("eval_max_examples")] = Field(1000, ge=10, le=1_000_000,
                                                         description="examples per side (a random sample)")
    k: float = Field(0.2, gt=0, le=1, description="min-k%: the share of lowest-probability tokens")
    group_size: int = Field(20, ge=2, le=1000)
    context: str = Field("{text}", description="how an example is scored, e.g. 'USR: My name is {text}.'")
    reference: Annotated[Optional[str], ServerPath(model_ref=True, why=(
        'a reference model is one of your succeeded trainings: {"training_id": ...}'))] = Field(
        None, description="a reference model for the likelihood-ratio score")
    seed: int = 0

    @field_validator("context")
    @classmethod
    def _ctx(cls, v: str) -> str:
        if v.count("{text}") != 1:
            raise ValueError("must contain {text} exactly once")
        return v


@register_attack
class Mia(Attack):
    name, title, Settings, Result = "mia", "Membership inference", MiaSettings, MiaResult
    order, section = 30, True

    def prepare(self, m: MiaSettings, ctx: Context) -> dict:
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

    def run(self, m: MiaSettings, model: Target, inputs: dict) -> MiaResult:
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
        return mia_result(sm, sn, context=ctx, group_size=m.group_size, seed=m.seed)

    def card(self, mia: MiaResult | None, model, reference) -> list[tuple[str, str]]:
        if mia is None:
            return [("Membership inference", '<span class="absent">not run</span>')]
        rocs = list(mia.scores) + ([mia.group] if mia.group else [])
        fprs = sorted({t.max_fpr for r in rocs for t in r.tpr_at}, reverse=True)
        negatives = {t.negatives for r in rocs for t in r.tpr_at}
        per_cell = len(negatives) > 1
        head = "".join(f"<th>TPR@{fmt_pct(f)} FPR</th>" for f in fprs)

        def line(name: str, r: RocResult) -> str:
            cells = "".join(tpr_cell(tpr_at(r, f), per_cell) for f in fprs)
            return f"<tr><td>{name}</td><td class=\"num\">{r.auc:.3f}</td>{cells}</tr>"

        body = "".join(line(esc(r.score), r) for r in mia.scores)
        if mia.group:
            size = f" of {mia.group_size}" if mia.group_size else ""
            body += line(f"group{esc(size)} ({esc(mia.group.score)})", mia.group)
        table = f'<table class="scores"><tr><th>Score</th><th>AUC</th>{head}</tr>{body}</table>'
        note = support_note(fprs, negatives.pop()) if len(negatives) == 1 else ""
        return [("Membership inference", f"{mia.members:,} members vs {mia.non_members:,} non-members; scored on: "
                                         f"<code>{esc(mia.context)}</code>"),
                ("", table + note)]

