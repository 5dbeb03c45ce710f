"""Name reconstruction (the Crypto-LLM paper): in a training record's context, does the model
pick the true name as the lowest-perplexity of ``n_candidates``?"""

from __future__ import annotations

from pydantic import Field

from attacks.data import read_texts
from attacks.kinds._shared import NameTrialsSettings, name_trials
from attacks.registry import Attack, Context, Target, register_attack
from attacks.report_format import fmt_pct
from attacks.results import SuccessRate
from attacks.scoring import progress_bar
from privatize.errors import SpecError


class ReconstructionSettings(NameTrialsSettings):
    candidates: str = Field(description="names to draw the other candidates from (.txt, one per line)")
    trials: int = Field(1000, ge=1, le=1_000_000)
    n_candidates: int = Field(100, ge=2, le=100_000, description="the true name included")


@register_attack
class Reconstruction(Attack):
    name, title, Settings, Result = "reconstruction", "Name reconstruction", ReconstructionSettings, SuccessRate
    order, section = 40, True
    local_only = "it reads files by path (records with gold spans, a list of candidate names)"

    def prepare(self, r: ReconstructionSettings, ctx: Context) -> dict:
        """The trials, and candidate names checked to leave every trial ``n_candidates - 1``
        others."""
        from attacks.reconstruction import candidate_pool

        trials = name_trials(r, "reconstruction", r.trials, ctx.cache)
        pool = candidate_pool(read_texts(r.candidates, column=r.text_column, what="reconstruction.candidates"))
        names = set(pool)
        fewest = min(len(pool) - (t.name in names) for t in trials)
        if fewest < r.n_candidates - 1:
            raise SpecError(f"reconstruction.n_candidates: {r.n_candidates} candidates per trial need "
                            f"{r.n_candidates - 1} names besides the true one; {r.candidates} leaves {fewest}")
        return {"trials": trials, "candidates": pool}

    def run(self, r: ReconstructionSettings, model: Target, inputs: dict) -> SuccessRate:
        from attacks.reconstruction import name_reconstruction

        trials = inputs["trials"]
        with progress_bar(len(trials), f"{model.name}: name reconstruction", model.progress) as bar:
            return name_reconstruction(model.adapter, trials, inputs["candidates"], r.n_candidates, r.seed,
                                       batch_tokens=model.scoring.batch_tokens, progress=bar.update)

    def card(self, r: SuccessRate | None, model, reference) -> list[tuple[str, str]]:
        if r is None:
            return [("Name reconstruction", '<span class="absent">not run</span>')]
        chance = f", chance {fmt_pct(1 / r.candidates)}" if r.candidates > 0 else ""
        return [("Name reconstruction", f"<b>{fmt_pct(r.rate)}</b> ({r.successes:,}/{r.trials:,}) "
                                        f"<span class=\"hint\">over {r.candidates:,} candidates{chance}</span>")]
