"""True-prefix reconstruction (the Crypto-LLM paper): generations after a training record's
true prefix, against the true continuation (normalised Levenshtein over content words)."""

from __future__ import annotations

from pydantic import Field

from attacks.kinds._shared import NameTrialsSettings, name_trials
from attacks.registry import Attack, Context, Target, register_attack
from attacks.results import TruePrefixResult
from privatize.errors import SpecError


class TruePrefixSettings(NameTrialsSettings):
    trials: int = Field(100, ge=1, le=1_000_000)
    samples: int = Field(100, ge=1, le=10_000)
    max_new_tokens: int = Field(48, ge=1, le=1024)
    top_k: int = Field(64, ge=1, le=1_000_000)
    min_s1_words: int = Field(1, ge=0, le=1000, description="skip trials whose S1 has fewer words (nothing to "
                                                             "reconstruct after a bare '.')")


@register_attack
class TruePrefix(Attack):
    name, title, Settings, Result = "true_prefix", "True-prefix reconstruction", TruePrefixSettings, TruePrefixResult
    order, section = 50, True
    local_only = "it reads records with gold spans by path"

    def prepare(self, t: TruePrefixSettings, ctx: Context) -> dict:
        from attacks.similarity import DEFAULT_MODEL, load_nlp

        trials = name_trials(t, "true_prefix", t.trials, ctx.cache, t.min_s1_words)
        try:
            nlp = load_nlp()
        except OSError:
            raise SpecError(f"true_prefix: the spaCy model {DEFAULT_MODEL} (content words) is not installed") from None
        return {"trials": trials, "nlp": nlp}

    def run(self, t: TruePrefixSettings, model: Target, inputs: dict) -> TruePrefixResult:
        from attacks.reconstruction import true_prefix

        return true_prefix(model.adapter, inputs["trials"], t.samples, t.seed, t.max_new_tokens, top_k=t.top_k,
                           nlp=inputs["nlp"])

    def card(self, p: TruePrefixResult | None, model, reference) -> list[tuple[str, str]]:
        return [("True-prefix distance", '<span class="absent">not run</span>' if p is None else
                 f"{p.mean_best_distance:.3f} mean best normalised Levenshtein "
                 f"<span class=\"hint\">(higher = more private; {p.trials:,} trials × {p.samples:,} samples)</span>")]
