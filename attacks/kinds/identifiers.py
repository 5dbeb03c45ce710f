"""Paper 003's identifier metrics (:mod:`attacks.identifiers`): Privacy, the share of the
identifiers the ``identifiers`` stage found that a model neither predicts nor regurgitates
(direct, indirect), and with held-out individuals the low-cost and the loss membership
inference per individual. Its report section is one table over the models."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from attacks.data import read_identifier_records
from attacks.registry import Attack, AttackSettings, Context, Target, register_attack
from attacks.report_format import DASH, TARGET_FPR, ModelResults, esc, fmt_pct, tpr_at, tpr_cell
from attacks.results import IdentifierLeakage
from privatize.errors import SpecError


class IdentifiersSettings(AttackSettings):
    """Identifiers are read from the sources' ``identifier_spans``; ``max_n``, ``case`` and
    ``digits`` only say how generated text is normalised before it is matched against
    them, so they must be the ``identifiers`` stage's."""

    members: str = Field(description="records the models were trained on: a privatization output with "
                                     "identifier_spans and individual_id (or Parquet/JSONL with those columns)")
    non_members: Optional[str] = Field(None, description="records of held-out individuals, likewise: needed for "
                                                         "the low-cost and the loss membership inference")
    max_n: int = Field(3, ge=1, le=5, description="the identifiers stage's max_n")
    case: Literal["fold", "keep"] = Field("fold", description="the identifiers stage's case")
    digits: Literal["keep", "zero"] = Field("keep", description="the identifiers stage's digits")
    samples: int = Field(2, ge=0, le=1000, description="generations per member record (0: predictions only)")
    prompt_chars: int = Field(24, ge=1, le=10_000, description="generations start from each record's first "
                                                               "characters")
    max_new_tokens: int = Field(48, ge=1, le=1024)
    limit: Optional[int] = Field(None, ge=1, le=10_000_000, description="records per source (a random sample)")
    seed: int = 0

    def settings(self):
        """The stage settings generated text is normalised under (no detector: the direct
        identifiers come from the spans)."""
        from privatize.stages.identifiers import IdentifiersSettings as StageSettings

        return StageSettings(direct="none", max_n=self.max_n, case=self.case, digits=self.digits)


@register_attack
class Identifiers(Attack):
    name, title, Settings, Result = "identifiers", "Identifiers (paper 003)", IdentifiersSettings, IdentifierLeakage
    order, section = 80, True
    local_only = "it reads records with their identifier spans by path"

    def prepare(self, s: IdentifiersSettings, ctx: Context) -> dict:
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

    def run(self, s: IdentifiersSettings, model: Target, inputs: dict) -> IdentifierLeakage:
        """Privacy over the members' records (teacher-forced predictions and ``samples``
        generations each); with non-members, both membership inferences per individual
        over everyone's records (predictions only: the members' are the ones made)."""
        from attacks.identifiers import Leaks, Record, leaks, loss_mia, low_cost_mia, privacy

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
        return res

    def render(self, results: ModelResults) -> str:
        """Paper 003's table: a row per model with identifier results."""
        if not results:
            return ""
        head = ("<tr><th>Model</th><th>Privacy</th><th>direct</th><th>indirect</th>"
                "<th>Low-cost MIA precision / recall / F1</th><th>Loss MIA AUC</th>"
                f"<th>TPR@{fmt_pct(TARGET_FPR)} FPR</th></tr>")
        body = []
        for name, x in results.items():
            low = x.low_cost_mia
            low_cell = (f"<td>{DASH}</td>" if low is None else
                        f'<td class="num" title="{low["guessed_members"]:,} of {low["individuals"]:,} individuals '
                        f'called members">{low["precision"]:.2f} / {low["recall"]:.2f} / {low["f1"]:.2f}</td>')
            roc = x.loss_mia
            auc = f"<td>{DASH}</td>" if roc is None else f'<td class="num">{roc.auc:.3f}</td>'
            tpr = tpr_cell(tpr_at(roc, TARGET_FPR) if roc else None, per_cell_negatives=True)
            link = results.link(name) if isinstance(results, ModelResults) else esc(name)
            body.append(f"<tr><td>{link}</td>"
                        + "".join(_privacy_cell(x.privacy.get(k)) for k in ("all", "direct", "indirect"))
                        + low_cell + auc + tpr + "</tr>")
        x = next(iter(results.values()))
        gens = f"{x.samples} generation{'s' if x.samples != 1 else ''} each" if x.samples else "predictions only"
        support = f"Privacy over {x.records:,} member records of {x.individuals:,} individuals ({gens})."
        if x.non_member_individuals:
            support += (f" Membership inference per individual: {x.individuals:,} members vs "
                        f"{x.non_member_individuals:,} held-out individuals ({x.non_member_records:,} records).")
        else:
            support += " No held-out individuals given: no membership inference."
        reading = ("Privacy is 1 − the share of the distinct identifiers in the members' records that the model "
                   "predicts (each of its tokens the model's top choice after the real text before it) or "
                   "regurgitates (in its generations); 1 = none given away. The low-cost attack calls an individual "
                   "a member when any of their indirect identifiers is predicted; the loss attack scores an "
                   "individual by their records' mean token loss.")
        return (f"<table>{head}{''.join(body)}</table>"
                f'<p class="hint">{esc(support)}</p><p class="hint">{esc(reading)}</p>')


def _privacy_cell(p: dict | None) -> str:
    """One kind's Privacy with the counts behind it (never the terms)."""
    if not p or not p.get("identifiers"):
        return f'<td>{DASH} <span class="hint">(none found)</span></td>'
    how = (f' title="predicted {p["predicted"]:,}, regurgitated {p["regurgitated"]:,}"'
           if "predicted" in p and "regurgitated" in p else "")
    return (f'<td class="num"{how}>{p["privacy"]:.3f} '
            f'<span class="hint">({p["leaked"]:,} of {p["identifiers"]:,} leaked)</span></td>')
