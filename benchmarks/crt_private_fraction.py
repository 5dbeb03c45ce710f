"""CRT routing on CustomerSim with dialogue turns as data points: the fraction of records
routed to the private split, with and without dedup (and with a minimum segment length),
through the in-process runner. The redaction flags (pi_hit, pi_c_hit) join this table
once the redact stage exists."""

import json
import tempfile
import time
from pathlib import Path

from _common import machine, need_data

from privatize.runner import run_pipeline
from privatize.spec import parse_spec


def run(corpus: Path, dedup: dict | None) -> dict:
    stages = [{"kind": "split", "unit": "line"}]
    if dedup is not None:
        stages += [{"kind": "dedup", **dedup}, {"kind": "split_private"}]
    spec = parse_spec({"stages": stages, "output": {"num_shards": 4}})
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        m = run_pipeline(spec, corpus, Path(d) / "out")
        secs = time.perf_counter() - t
    seg = m["stages"][0]["stats"]["segments"]
    if dedup is None:
        return {"segments": seg, "private": 0, "seconds": secs}
    st = m["stages"][1]["stats"]
    return {"segments": seg, "private": m["stages"][2]["stats"].get("private", 0),
            "masked_char_fraction": st["masked_chars"] / st["chars"], "seconds": secs}


def main() -> None:
    corpus = need_data() / "customersim" / "train.jsonl"
    n_dialogues = sum(1 for _ in open(corpus, encoding="utf-8"))
    rows = [("no dedup (nothing flagged yet)", run(corpus, None))]
    for min_len in (0, 20, 40):
        rows.append((f"SHA-1 turn dedup, min_length {min_len}", run(corpus, {"min_length": min_len})))
    print(f"CustomerSim train: {n_dialogues} dialogues, turns as data points ({machine()})")
    print(f"{'setting':<38} {'turns':>8} {'private':>8} {'fraction':>9} {'masked chars':>13}")
    for name, r in rows:
        frac = r["private"] / r["segments"]
        mc = f"{r['masked_char_fraction']:.3f}" if "masked_char_fraction" in r else "-"
        print(f"{name:<38} {r['segments']:>8} {r['private']:>8} {frac:>9.3f} {mc:>13}")
    print(json.dumps({name: r for name, r in rows}))


if __name__ == "__main__":
    main()
