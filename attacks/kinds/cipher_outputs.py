"""Entity tokens in generations (SoE Table 5): how many entity tokens a model trained on
encrypted entities writes, how many fail to decrypt under the entity stage's key, and how
many training PII values resurface in plain text."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field

from attacks.data import read_texts
from attacks.kinds._shared import resolve_key
from attacks.registry import Attack, AttackSettings, Context, Target, register_attack
from attacks.report_format import fmt_pct
from attacks.results import CipherOutputs as CipherOutputsResult
from privatize.errors import SpecError


class CipherOutputsSettings(AttackSettings):
    key: str = Field(min_length=1, description="the entity stage's aes-siv (or aes-ecb) key reference")
    prompts: str = Field(description="texts to prompt with (.txt: one per line)")
    text_column: str = "text"
    count: int = Field(200, ge=1, le=1_000_000, description="prompts (a random sample)")
    prompt_tokens: Optional[int] = Field(None, ge=1, le=4096, description="cut each prompt to its first tokens")
    samples: int = Field(1, ge=1, le=1000, description="generations per prompt")
    max_new_tokens: int = Field(64, ge=1, le=1024)
    training_pii: Optional[str] = Field(None, description="plaintext PII of the training set: a .txt (one value "
                                                          "per line) or .jsonl records whose gold spans are PII")
    seed: int = 0


def _training_pii(c: CipherOutputsSettings) -> list[str]:
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
    name, title, Settings = "cipher_outputs", "Entity tokens in generations", CipherOutputsSettings
    Result, order, section = CipherOutputsResult, 70, True
    local_only = "it reads files by path (prompts, the training set's plaintext PII)"

    def prepare(self, c: CipherOutputsSettings, ctx: Context) -> dict:
        """The entity stage's key (aes-siv, or aes-ecb when reproducing the paper) that
        generated entity tokens are checked under, the prompts, the training set's PII."""
        key = resolve_key(c.key, ctx.base_dir, ("aes-siv", "aes-ecb"), "cipher_outputs.key")
        prompts = read_texts(c.prompts, column=c.text_column, limit=c.count, seed=c.seed,
                             what="cipher_outputs.prompts")
        return {"key": key, "prompts": prompts, "training_pii": _training_pii(c) if c.training_pii else []}

    def run(self, c: CipherOutputsSettings, model: Target, inputs: dict) -> CipherOutputsResult:
        from attacks.cipher_outputs import cipher_outputs

        adapter, prompts = model.adapter, inputs["prompts"]
        if c.prompt_tokens:
            prompts = [adapter.tok.decode(adapter.tok(p, add_special_tokens=False)["input_ids"][: c.prompt_tokens])
                       for p in prompts]
        gens = adapter.generate(prompts, samples=c.samples, max_new_tokens=c.max_new_tokens, seed=c.seed)
        # only the new text: a prompt cut from the data may hold genuine tokens or PII itself
        return cipher_outputs([g for gs in gens for g in gs], inputs["key"], inputs["training_pii"])

    def card(self, c: CipherOutputsResult | None, model, reference) -> list[tuple[str, str]]:
        return [("Cipher outputs", '<span class="absent">not run</span>' if c is None else
                 f"{c.total_tokens:,} entity tokens ({c.unique_tokens:,} unique); {c.invalid_tokens:,} invalid "
                 f"({c.unique_invalid:,} unique), failure ratio {fmt_pct(c.failure_ratio)}; "
                 f"<b>{c.resurfaced_plaintext:,}</b> training PII values resurfaced in plain text")]
