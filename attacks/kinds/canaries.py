"""Canary exposure (Carlini et al. 2019): how many bits the model saves an attacker guessing
the secrets the ``canaries`` stage inserted, against never-inserted references."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from attacks.kinds._shared import resolve_key
from attacks.registry import Attack, AttackSettings, Context, Target, register_attack
from attacks.report_format import esc, log2_candidates
from attacks.results import ExposureResult
from attacks.scoring import progress_bar
from privatize.policy import Credential, Quota


class CanarySettings(AttackSettings):
    """The canary set inserted by the ``canaries`` stage: the same key and settings
    derive the same secrets."""

    key: Annotated[str, Credential(kinds=("hmac",))] = Field(min_length=1, description="the canary stage's key "
                                                                                        "reference")
    format: str = "My ID is: {secret}"
    digits: Annotated[int, Quota("eval_max_exact_digits", when={"method": "exact"})] = Field(6, ge=1, le=9)
    count: Annotated[int, Quota("eval_max_canaries")] = Field(10, ge=1, le=1000)
    held_out: Annotated[int, Quota("eval_max_canaries")] = Field(10, ge=0, le=1000)
    repeats: int = Field(20, ge=1, le=10000, description="times each canary was inserted (for the report)")
    seed_label: str = Field("", max_length=200, description="the stage's seed_label")
    method: Literal["exact", "extrapolated"] = "exact"
    sample: Annotated[int, Quota("eval_max_examples", when={"method": "extrapolated"})] = Field(
        10000, ge=100, le=1_000_000, description="extrapolated: candidates scored for the fit")

    @field_validator("format")
    @classmethod
    def _one_placeholder(cls, v: str) -> str:
        if v.count("{secret}") != 1:
            raise ValueError("must contain {secret} exactly once")
        return v

    @model_validator(mode="after")
    def _exact_size(self):
        if self.method == "exact" and self.digits > 7:
            raise ValueError(f"exact exposure scores all 10^{self.digits} candidates; use at most 7 digits "
                             "or method: extrapolated")
        return self


def canary_secrets(c: CanarySettings, base_dir: str | None = None) -> list[str]:
    """Inserted secrets then held-out ones, derived from the canary key (never stored)."""
    from privatize.stages.canaries import derive_secrets

    km = resolve_key(c.key, base_dir, ("hmac",), "canaries.key")
    return derive_secrets(km.secret, c.digits, c.count + c.held_out, c.seed_label)


@register_attack
class Canaries(Attack):
    name, title, Settings, Result = "canaries", "Canary exposure", CanarySettings, ExposureResult
    order, section = 20, True

    def prepare(self, c: CanarySettings, ctx: Context) -> list[str]:
        return canary_secrets(c, ctx.base_dir)

    def run(self, c: CanarySettings, model: Target, secrets: list[str]) -> ExposureResult:
        from attacks.exposure import canary_exposure

        repeats = [c.repeats] * c.count + [0] * c.held_out
        total = 10 ** c.digits if c.method == "exact" else min(c.sample, 10 ** c.digits)
        with progress_bar(total, f"{model.name}: canary exposure", model.progress) as bar:
            return canary_exposure(model.adapter, c.format, c.digits, secrets, repeats, method=c.method,
                                   sample=c.sample, progress=bar.update)

    def card(self, x: ExposureResult | None, model, reference) -> list[tuple[str, str]]:
        if x is None:
            return [("Canary exposure", '<span class="absent">not run</span>')]
        inserted = sum(1 for c in x.canaries if c.repeats > 0)
        never = len(x.canaries) - inserted
        log2r = log2_candidates(x)
        ceiling = f" of log₂|R| = {log2r:.2f}" if log2r is not None else ""
        rows = [
            ("Max exposure", f"<b>{x.max_exposure:.2f}</b> bits{ceiling} "
                             f"<span class=\"hint\">({esc(x.method)}, |R| = {x.candidates:,})</span>"),
            ("Mean exposure", f"{x.mean_exposure:.2f} bits over {inserted} inserted canaries"),
        ]
        if x.max_reference_exposure is not None:
            rows.append(("Reference canaries",
                         f"max {x.max_reference_exposure:.2f} bits over {never} never inserted "
                         "<span class=\"hint\">(the level chance reaches)</span>"))
        rows.append(("Canary format", f"<code>{esc(x.format)}</code>, {x.digits} digits; scored: {esc(x.scored)}"))
        return rows
