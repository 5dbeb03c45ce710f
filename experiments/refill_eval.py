"""Paper 002's evaluation (its Tables 3-5): what masking costs a language model, and how
much refilling the masks wins back.

From one causal LM pre-trained on WikiText-2, continual pre-training on:

* ``oracle``: the raw corpus;
* ``baseline0``: the masked corpus, ``<MASK>`` an ordinary token;
* ``baseline1``: the masked corpus, zero loss on ``<MASK>`` (``data.mask_token_loss``);
* ``top1`` / ``topk``: the corpus masked then refilled by a masked LM (the ``refill``
  stage), one per strategy;
* ``topk_ft``: Top-K with the filler first fine-tuned on the masked corpus itself (kind
  ``mlm`` from the filler's checkpoint; ``<MASK>`` carries no loss, so it learns only the
  visible words), the paper's FT variant;

for each masking technique; then perplexity on a held-back, unmasked test set. The
paper's order: the oracle best, the refills between it and the baselines. Every corpus
goes through the product's own ``mask``/``refill`` stages and ``privatize train``
(Ray Train), with the same seed, steps and tokenizer (the base model's), so the runs
differ only in their text.

    from experiments.refill_eval import EvalPlan, evaluate
    result = evaluate(EvalPlan(train=..., test=[...], base_corpus=..., work=...))

``python -m experiments.refill_eval`` runs the full table and draws it (:func:`main`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

METHODS = ("oracle", "baseline0", "baseline1", "top1", "topk", "topk_ft")
TECHNIQUES = ("allow_list", "vocab_threshold", "entity_tagger")
LABELS = {"oracle": "Oracle", "baseline0": "Baseline0 (<MASK> a token)", "baseline1": "Baseline1 (no loss on <MASK>)",
          "top1": "Refill Top-1", "topk": "Refill Top-K", "topk_ft": "Refill Top-K, fine-tuned filler"}


@dataclass(kw_only=True)
class SmallLM:
    """How the small causal LMs of an evaluation are trained: a base model from a preset
    (``base_steps`` on a public corpus, its own tokenizer of ``vocab_size``), then
    ``adapt_steps`` of continual pre-training per corpus under comparison."""

    preset: str = "tiny"
    vocab_size: int = 4096
    seq_len: int = 128
    batch_size: int = 16
    lr: float = 0.002
    base_steps: int = 600
    adapt_steps: int = 300
    seed: int = 0
    base_model: Path | None = None
    """A causal LM folder to adapt from instead (a base model another evaluation trained:
    ``preset``, ``vocab_size`` and ``base_steps`` are then unused)."""


def base_model(plan: SmallLM, corpus: Path, work: Path, common: dict, optim: dict, progress: bool) -> Path:
    """The base model's folder: ``plan.base_model``, or one pretrained from ``plan.preset``
    on ``corpus`` (in ``work/base``; done already when an earlier evaluation got there)."""
    return _from_preset(plan, "pretrain", plan.base_model, plan.base_steps, corpus, work / "base", common, optim,
                        progress)


def filler_model(plan, corpus: Path, work: Path, common: dict, optim: dict, progress: bool) -> Path:
    """The masked LM's folder: ``plan.filler``, or one trained (kind ``mlm``) from
    ``plan.filler_preset`` (else ``plan.preset``) for ``plan.filler_steps`` on ``corpus``
    with its own tokenizer of ``plan.vocab_size`` (in ``work/filler``; done already when an
    earlier evaluation got there). ``plan``: an :class:`EvalPlan` or anything with those
    fields."""
    preset = getattr(plan, "filler_preset", None) or plan.preset
    return _from_preset(plan, "mlm", plan.filler, plan.filler_steps, corpus, work / "filler", common, optim,
                        progress, preset=preset)


def _from_preset(plan, kind: str, given: Path | None, steps: int, corpus: Path, out: Path, common: dict,
                 optim: dict, progress: bool, preset: str | None = None) -> Path:
    """``given``, or a model of ``kind`` trained from ``preset`` (else ``plan.preset``) with
    its own tokenizer (``plan.vocab_size``) for ``steps`` on ``corpus``, in ``out``."""
    if given is not None:
        return Path(given)
    train_model({**common, "kind": kind, "data": {"path": str(corpus), "seq_len": plan.seq_len},
            "model": {"preset": preset or plan.preset}, "tokenizer": {"vocab_size": plan.vocab_size},
            "optim": {**optim, "max_steps": steps}}, out, progress)
    return out / "model"


def write_jsonl(rows: list[dict], path: Path) -> Path:
    """``rows`` as JSON lines (UTF-8) at ``path``, its folder made; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@dataclass
class EvalPlan(SmallLM):
    train: Path
    """The adaptation corpus: JSONL (``doc_id``, ``text``)."""
    test: list[str]
    """Held-back, unmasked test texts."""
    base_corpus: Path
    """The pre-training corpus of the base model and of a filler trained here (JSONL)."""
    work: Path
    filler: Path | None = None
    """A masked-LM folder; None trains one (kind mlm) on ``filler_corpus``."""
    filler_preset: str | None = None
    """The preset of a filler trained here (None: ``preset``, the base model's)."""
    filler_corpus: Path | None = None
    """The public corpus a filler trained here learns from (None: ``base_corpus``)."""
    techniques: tuple[str, ...] = TECHNIQUES
    methods: tuple[str, ...] = METHODS
    filler_steps: int = 600
    ft_steps: int = 200
    refill: dict = field(default_factory=dict)
    """Extra settings of the refill stage (``k``, ``allow_list_size``...)."""


def customersim_dialogues(path: str | Path, n: int) -> list[dict]:
    """The first ``n`` dialogues (``doc_id``, ``text``) of a CustomerSim split, canaries
    left out."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["kind"] == "dial":
                out.append({"doc_id": r["id"], "text": r["text"]})
                if len(out) == n:
                    break
    return out


def train_model(cfg: dict, out: Path, progress: bool) -> dict:
    from train.config import parse_config
    from train.run import SUMMARY, run_training

    if (out / SUMMARY).is_file():  # done in an earlier, interrupted evaluation
        return json.loads((out / SUMMARY).read_text())
    return run_training(parse_config({**cfg, "output": str(out)}), progress=progress)


def privatize_corpus(stages: list[dict], corpus: Path, out: Path) -> dict:
    from privatize.api import run
    from privatize.spec import parse_spec

    if (out / "manifest.json").is_file():
        return json.loads((out / "manifest.json").read_text())
    return run(parse_spec({"stages": stages}), corpus, out)


def stage_stats(manifest: dict, kind: str) -> dict:
    return next(s["stats"] for s in manifest["stages"] if s["kind"] == kind)


def evaluate(plan: EvalPlan, progress: bool = True) -> dict:
    """Train every model of the table and measure it; returns the figures (also written
    to ``work/result.json``). An interrupted evaluation picks up where it stopped."""
    from attacks.model import ModelAdapter

    work = plan.work
    work.mkdir(parents=True, exist_ok=True)
    optim = {"batch_size": plan.batch_size, "lr": plan.lr, "warmup_steps": min(20, plan.adapt_steps // 5),
             "seed": plan.seed, "epochs": 1000}
    common = {"version": 1, "data": {"seq_len": plan.seq_len}, "checkpoint_every": 10_000_000,
              "report_every": 10_000_000}
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if progress:
            print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    say("base model: pretrain on the base corpus")
    base = base_model(plan, plan.base_corpus, work, common, optim, progress)
    if plan.filler is None:
        say("filler: a masked LM on the base corpus (kind mlm)")
    filler = filler_model(plan, plan.filler_corpus or plan.base_corpus, work, common, optim, progress)

    def adapt(name: str, data: Path, mask_loss: bool = True) -> float:
        say(f"{name}: continual pre-training")
        run = work / "runs" / name
        train_model({**common, "kind": "continue", "data": {"path": str(data), "seq_len": plan.seq_len,
                                                        "mask_token_loss": mask_loss},
                "model": {"preset": None, "checkpoint": str(base)},
                "optim": {**optim, "max_steps": plan.adapt_steps}}, run, progress)
        return ModelAdapter.load(run / "model").perplexity(plan.test)

    result: dict = {"plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(plan).items()
                             if k != "test"},
                    "test_texts": len(plan.test), "filler": str(filler),
                    "base_perplexity": ModelAdapter.load(base).perplexity(plan.test),
                    "perplexity": {}, "masked_share": {}, "refill": {}}
    oracle = adapt("oracle", plan.train) if "oracle" in plan.methods else None
    for tech in plan.techniques:
        row: dict = {"oracle": oracle} if oracle is not None else {}
        mask = {"kind": "mask", "technique": tech}
        masked = work / "corpora" / tech
        m = privatize_corpus([mask], plan.train, masked)
        st = stage_stats(m, "mask")
        result["masked_share"][tech] = st["words_masked"] / max(1, st["words"])
        say(f"{tech}: {100 * result['masked_share'][tech]:.1f}% of words masked")
        if "baseline0" in plan.methods:
            row["baseline0"] = adapt(f"{tech}-baseline0", masked, mask_loss=False)
        if "baseline1" in plan.methods:
            row["baseline1"] = adapt(f"{tech}-baseline1", masked, mask_loss=True)
        for method in ("top1", "topk", "topk_ft"):
            if method not in plan.methods:
                continue
            strategy, fill = method.split("_")[0], filler
            if method == "topk_ft":
                say(f"{tech}: fine-tuning the filler on the masked corpus")
                train_model({**common, "kind": "mlm", "data": {"path": str(masked), "seq_len": plan.seq_len},
                        "model": {"preset": None, "checkpoint": str(filler)},
                        "optim": {**optim, "max_steps": plan.ft_steps}}, work / "fillers" / tech, progress)
                fill = work / "fillers" / tech / "model"
            refill = {"kind": "refill", "checkpoint": str(fill), "strategy": strategy, "seed": plan.seed,
                      **({k: v for k, v in plan.refill.items() if strategy == "topk" or k not in ("k", "word_list")})}
            out = work / "corpora" / f"{tech}-{method}"
            rm = privatize_corpus([mask, refill], plan.train, out)
            rs = stage_stats(rm, "refill")
            result["refill"][f"{tech}-{method}"] = {
                k: rs.get(k, 0) for k in ("masks_filled", "top_choice_original", "fills_on_allow_list",
                                          "original_known")}
            row[method] = adapt(f"{tech}-{method}", out)
        result["perplexity"][tech] = row
        say(f"{tech}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
    result["checks"] = order_checks(result["perplexity"])
    result["seconds"] = round(time.perf_counter() - t0, 1)
    (work / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def order_checks(table: dict[str, dict[str, float]]) -> dict[str, dict[str, bool]]:
    """Paper 002's expected order per technique: the oracle best; each refill better than
    both baselines (between the oracle and them); Baseline1 better than Baseline0."""
    out = {}
    for tech, row in table.items():
        c = {}
        others = [v for k, v in row.items() if k != "oracle"]
        if "oracle" in row and others:
            c["oracle_best"] = all(row["oracle"] <= v for v in others)
        base = [row[b] for b in ("baseline0", "baseline1") if b in row]
        for r in ("top1", "topk", "topk_ft"):
            if r in row and base:
                c[f"{r}_beats_baselines"] = row[r] < min(base)
                if "oracle" in row:
                    c[f"{r}_between"] = row["oracle"] <= row[r] < min(base)
        if "baseline0" in row and "baseline1" in row:
            c["baseline1_beats_baseline0"] = row["baseline1"] < row["baseline0"]
        out[tech] = c
    return out


def markdown(result: dict) -> str:
    """The table as paper 002 prints it: methods down, techniques across."""
    techs = list(result["perplexity"])
    lines = ["| method | " + " | ".join(techs) + " |", "|---|" + "---:|" * len(techs)]
    methods = [m for m in METHODS if any(m in result["perplexity"][t] for t in techs)]
    for m in methods:
        cells = [result["perplexity"][t].get(m) for t in techs]
        lines.append(f"| {LABELS[m]} | " + " | ".join("" if v is None else f"{v:.1f}" for v in cells) + " |")
    lines.append("| masked share of words | " + " | ".join(f"{100 * result['masked_share'][t]:.1f}%" for t in techs)
                 + " |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    """Grouped bars: perplexity per method, one group per technique (log scale), with the
    base model's perplexity as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    techs = list(result["perplexity"])
    methods = [m for m in METHODS if any(m in result["perplexity"][t] for t in techs)]
    fig, ax = plt.subplots(figsize=(1.8 + 2.2 * len(techs), 4))
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(techs))]
        ys = [result["perplexity"][t].get(m, math.nan) for t in techs]
        ax.bar(xs, ys, width, label=LABELS[m])
    ax.axhline(result["base_perplexity"], color="grey", ls="--", lw=1, label="base model (WikiText-2 only)")
    ax.set_xticks(range(len(techs)), [f"{t}\n({100 * result['masked_share'][t]:.1f}% masked)" for t in techs])
    ax.set_yscale("log")
    ax.set_ylabel("test perplexity (unmasked text)")
    ax.set_title("Masking and refilling (paper 002): continual pre-training on each corpus")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---- the experiment, run as a script: python -m experiments.refill_eval ----

RUN_DOC = """Paper 002's Table 3 at small scale (issue 21): perplexity on held-back CustomerSim
dialogues of a tiny causal LM pre-trained on WikiText-2, then continually pre-trained on
CustomerSim dialogues raw (Oracle), masked with ``<MASK>`` a token (Baseline0), masked
with zero loss on ``<MASK>`` (Baseline1), and masked then refilled by a tiny BERT filler
(Top-1, Top-K, and Top-K after fine-tuning the filler on the masked corpus), for each
masking technique; the expected order (Oracle best, refills
between it and the baselines) checked. Writes benchmarks/results/refill_eval.{json,md}
and benchmarks/results/refill_eval.png.

    .venv/bin/python -m experiments.refill_eval [--train 1500] [--test 200] [--adapt-steps 200]

An interrupted run resumes (its work folder keeps every finished training).
"""


def main() -> None:
    import argparse
    from datetime import date

    from experiments.common import ROOT, gutenberg_texts, machine, need_data, save_result, wikitext_corpus

    ap = argparse.ArgumentParser(description=RUN_DOC.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=1500, help="CustomerSim training dialogues")
    ap.add_argument("--test", type=int, default=200, help="held-back test dialogues")
    ap.add_argument("--base-steps", type=int, default=600)
    ap.add_argument("--filler-steps", type=int, default=600)
    ap.add_argument("--adapt-steps", type=int, default=200)
    ap.add_argument("--filler-preset", default=None, help="preset of the filler trained here (default: the base "
                    "model's, tiny); small is the stronger filler")
    ap.add_argument("--filler-corpus", choices=("wikitext", "public"), default="wikitext",
                    help="what the filler learns from: WikiText-2 valid+test (2.3 MB), or public = that plus the "
                    "Gutenberg stories of squality_gutenberg (about 9 MB in all)")
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--ft-steps", type=int, default=200, help="fine-tuning steps of the filler on a masked corpus")
    ap.add_argument("--techniques", default="allow_list,vocab_threshold,entity_tagger")
    ap.add_argument("--work", default=str(ROOT / "benchmarks" / "work" / "refill_eval"))
    args = ap.parse_args()

    data = need_data()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = wikitext_corpus(work)
    filler_corpus = None
    if args.filler_corpus == "public":
        filler_corpus = work / "public.jsonl"
        paras = [p.strip() for d in gutenberg_texts() for p in d.split("\n\n") if len(p.strip()) > 40]
        rows = [json.loads(line) for line in base.read_text(encoding="utf-8").splitlines()]
        rows += [{"doc_id": f"gutenberg-{i}", "text": p} for i, p in enumerate(paras)]
        filler_corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    train = work / "customersim-train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in customersim_dialogues(data / "customersim" / "train.jsonl",
                                                                        args.train)))
    test = [r["text"] for r in customersim_dialogues(data / "customersim" / "test.jsonl", args.test)]
    plan = EvalPlan(train=train, test=test, base_corpus=base, work=work,
                    techniques=tuple(args.techniques.split(",")), base_steps=args.base_steps,
                    filler_steps=args.filler_steps, filler_preset=args.filler_preset,
                    filler_corpus=filler_corpus, lr=args.lr, adapt_steps=args.adapt_steps, ft_steps=args.ft_steps)
    print(f"# {machine()}; {args.train} training and {len(test)} test dialogues (CustomerSim), base on WikiText-2 "
          f"valid+test, filler {args.filler_preset or 'tiny'} on {args.filler_corpus}", flush=True)
    result = evaluate(plan)
    result.update(date=str(date.today()), machine=machine())
    table = markdown(result)
    png = plot(result, ROOT / "benchmarks" / "results" / "refill_eval.png")
    print(f"\nbase model (WikiText-2 only): perplexity {result['base_perplexity']:.1f}\n")
    print(table)
    print("\nexpected order (paper 002):")
    for tech, checks in result["checks"].items():
        print(f"  {tech}: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in checks.items()))
    for name, r in result["refill"].items():
        print(f"  {name}: {r['masks_filled']} masks filled, the filler's first choice was the hidden word "
              f"{r['top_choice_original']} times of {r['original_known']}, {r['fills_on_allow_list']} fills "
              "on the allow list")
    save_result("refill_eval", result)
    (ROOT / "benchmarks" / "results" / "refill_eval.md").write_text(table + "\n")
    print(f"\nplot: {png}; took {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
