"""What entity-graph synthesis asks of an LLM, and what reaches it (issue 20).

1. **Requests and tokens per source article** on QuALITY articles (L-Eval's 15, the SoE
   setting): redact (``operator: encrypt``, AES-SIV entity tokens), then ``synthesize``
   with its defaults (20 entities, all pairs, threshold 0.5, tuples up to 10) against the
   scripted OpenAI-compatible server of the tests (tests/llm_double.py: a labelled
   double; it scores every pair 0.9, so every pair becomes an edge, the most requests the
   graph can make). Every prompt carries the whole article, so prompt tokens per article
   are counted exactly (bytes / 4, a common estimate for English BPE); completion tokens
   are bounded by ``max_tokens`` (512). The cost estimate uses the prices given on the
   command line (default: $0.15 per million input tokens, $0.60 per million output).
2. **What reaches the LLM** on CustomerSim dialogues with gold PII spans: the share of gold
   PII strings present in the prompts, against the redaction's miss rate on the same
   dialogues (the share present in the redacted text).

    python benchmarks/synthesis_cost.py [--articles 3] [--dialogues 200] [--in-price 0.15] [--out-price 0.60]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _common import ROOT, machine, need_data, save_result

sys.path.insert(0, str(ROOT))


def _run(rows: list[dict], tmp: Path, name: str, llm_url: str, **synth) -> tuple[dict, list]:
    from privatize import run
    from privatize.keys import new_key, write_key_file
    from privatize.spec import parse_spec

    d = tmp / name
    (d / "in").mkdir(parents=True)
    (d / "in" / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    write_key_file(new_key("aes-siv"), d / "entity.key")
    spec = parse_spec({"stages": [{"kind": "redact", "operator": "encrypt", "key": "file:entity.key"},
                                  {"kind": "synthesize", "cache": "cache", **synth,
                                   "llm": {"base_url": llm_url, "model": "scripted", "max_in_flight": 32}}]})
    m = run(spec, d / "in", d / "out", spec_dir=str(d))
    import pyarrow.parquet as pq

    out = [r for f in sorted((d / "out" / "shards").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return m, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--articles", type=int, default=3)
    ap.add_argument("--dialogues", type=int, default=200)
    ap.add_argument("--in-price", type=float, default=0.15, help="$ per million input tokens")
    ap.add_argument("--out-price", type=float, default=0.60, help="$ per million output tokens")
    args = ap.parse_args()
    from tests.llm_double import ScriptedLLM

    data = need_data()
    arts = [json.loads(line) for line in open(data / "quality" / "leval_quality_15_articles.jsonl", encoding="utf-8")]
    arts = arts[: args.articles]
    print(f"# {machine()}; scripted OpenAI-compatible server (test double: every pair scores 0.9)")
    with tempfile.TemporaryDirectory() as t, ScriptedLLM() as llm:
        tmp = Path(t)
        m, _ = _run([{"id": f"q{a['doc_index']}", "text": a["article"]} for a in arts], tmp, "quality", llm.url)
        st = next(s["stats"] for s in m["stages"] if s["kind"] == "synthesize")
        prompt_bytes = sum(len(p.encode("utf-8")) for p in llm.prompts())
        src_tokens = sum(len(a["article"].encode("utf-8")) for a in arts) / 4
        tokens_in = prompt_bytes / 4
        tokens_out_max = st["requests"] * 512
        cost = tokens_in / 1e6 * args.in_price + tokens_out_max / 1e6 * args.out_price
        n = len(arts)
        print(f"QuALITY: {n} articles, {src_tokens / n:,.0f} source tokens each (bytes/4)")
        print(f"  requests per article: {st['requests'] / n:,.0f} (entities capped at 20: "
              f"{st['edges'] / n:,.0f} edges and {st['tuples'] / n:,.0f} tuples per article)")
        print(f"  prompt tokens per article: {tokens_in / n:,.0f} ({tokens_in / src_tokens:,.0f}x the source: every "
              "prompt carries the article)")
        print(f"  completion tokens per article: at most {tokens_out_max / n:,.0f} (max_tokens 512); SoE grew 65K "
              f"source tokens into 10-30M, {10e6 / 65e3:.0f}-{30e6 / 65e3:.0f} per source token")
        print(f"  cost estimate at ${args.in_price}/M in, ${args.out_price}/M out: ${cost / n:,.2f} per article, "
              f"${cost / (src_tokens / 1e3):,.3f} per thousand source tokens")
        quality = {"articles": n, "requests_per_article": st["requests"] / n, "prompt_tokens_per_article": tokens_in / n,
                   "max_completion_tokens_per_article": tokens_out_max / n, "cost_per_article_usd": cost / n,
                   "prices": [args.in_price, args.out_price]}

        rows = []
        for line in open(data / "customersim" / "train.jsonl", encoding="utf-8"):
            r = json.loads(line)
            if r["kind"] == "dial":
                rows.append(r)
            if len(rows) == args.dialogues:
                break
        llm.requests.clear()
        m, out = _run([{"id": r["id"], "text": r["text"]} for r in rows], tmp, "customersim", llm.url, max_entities=6)
        gold = sorted({s["text"] for r in rows for s in r["spans"]})
        articles = [r["text"] for r in out if r["synthesis_source"] is None]
        synthetic = [r["text"] for r in out if r["synthesis_source"] is not None]
        sent = llm.prompts()

        def share(texts):
            joined = "\n\x00".join(texts)
            return sum(1 for g in gold if g in joined) / len(gold)

        missed, in_prompts, in_synth = share(articles), share(sent), share(synthetic)
        print(f"CustomerSim: {len(rows)} dialogues, {len(gold)} distinct gold PII strings, {len(sent) // 2} prompts")
        print(f"  gold PII strings left in the redacted dialogues (redaction's miss rate): {100 * missed:.1f}%")
        print(f"  ... present in the prompts sent to the LLM: {100 * in_prompts:.1f}%; in the synthetic records: "
              f"{100 * in_synth:.1f}% (at most the miss rate: {in_prompts <= missed and in_synth <= missed})")
    res = {"quality": quality, "customersim": {"dialogues": len(rows), "gold_strings": len(gold),
                                               "miss_rate": missed, "in_prompts": in_prompts,
                                               "in_synthetic": in_synth}}
    print(json.dumps(res))
    save_result("synthesis_cost", {"machine": machine(), **res})


if __name__ == "__main__":
    main()
