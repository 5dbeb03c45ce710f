"""Paper 002's evaluation end to end at tiny scale (issue 21): a WikiText-2 base model,
continual pre-training on CustomerSim dialogues raw, masked (both baselines) and refilled
(Top-1, Top-K, Top-K after fine-tuning the filler on the masked corpus) by the session's
tiny filler, perplexity on held-back dialogues. Few steps:
the full table, and whether the paper's order holds, is benchmarks/refill_eval.py."""

import json
import math

import pyarrow.parquet as pq

from attacks.refill_eval import EvalPlan, customersim_dialogues, evaluate, markdown, order_checks, plot
from privatize.ciphers.tokens import MASK_TOKEN


def _texts(folder):
    return [t for f in sorted((folder / "shards").glob("*.parquet")) for t in pq.read_table(f)["text"].to_pylist()]


def test_the_paper_002_table_end_to_end(shared_data, wikitext_docs, tiny_filler, tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in customersim_dialogues(shared_data / "customersim" / "train.jsonl", 48)))
    test = [r["text"] for r in customersim_dialogues(shared_data / "customersim" / "test.jsonl", 12)]
    plan = EvalPlan(train=train, test=test, base_corpus=wikitext_docs["valid"], work=tmp_path / "eval",
                    filler=tiny_filler, techniques=("vocab_threshold",), vocab_size=1024, seq_len=64,
                    batch_size=8, base_steps=30, adapt_steps=12, ft_steps=6,
                    # one row of each kind (raw, masked, refilled by a fine-tuned filler): every
                    # row is a Ray Train run of its own; the baselines differ only in the
                    # <MASK> loss weight (train.data.pack, unit-tested) and Top-1 / Top-K in the
                    # refill strategy (tests/privatize/test_refill_stage.py)
                    methods=("oracle", "baseline1", "topk_ft"))
    r = evaluate(plan, progress=False)
    row = r["perplexity"]["vocab_threshold"]
    assert set(row) == {"oracle", "baseline1", "topk_ft"}
    assert all(math.isfinite(v) and v > 1 for v in row.values())
    # a dozen steps on in-domain dialogues already beat the WikiText-only base model on them
    assert row["oracle"] < r["base_perplexity"]
    assert 0.02 < r["masked_share"]["vocab_threshold"] < 0.4
    corpora = tmp_path / "eval" / "corpora"
    masked = _texts(corpora / "vocab_threshold")
    assert len(masked) == 48
    assert any(MASK_TOKEN in t for t in masked)
    assert not (corpora / "vocab_threshold-top1").exists()  # the rows not asked for are not run
    assert not any(MASK_TOKEN in t for t in _texts(corpora / "vocab_threshold-topk_ft"))
    assert r["refill"]["vocab_threshold-topk_ft"]["masks_filled"] == sum(t.count(MASK_TOKEN) for t in masked)
    assert r["checks"] == order_checks(r["perplexity"]) and set(r["checks"]["vocab_threshold"]) >= {
        "oracle_best", "topk_ft_between"}
    # the fine-tuned filler started from the session's filler and trained on the masked corpus
    ft = json.loads((tmp_path / "eval" / "fillers" / "vocab_threshold" / "summary.json").read_text())
    assert ft["kind"] == "mlm" and ft["config"]["model"]["checkpoint"] == str(tiny_filler)
    assert ft["tokenizer"]["trained"] is False  # the filler's own tokenizer
    assert "| Refill Top-K, fine-tuned filler |" in markdown(r)
    assert plot(r, tmp_path / "table.png").stat().st_size > 10_000
    # a second call finds every run done and measures again: the same figures
    assert evaluate(plan, progress=False)["perplexity"] == r["perplexity"]
