"""Membership-inference scoring throughput (examples/s): the ``tiny`` preset scoring
customersim dialogues in this process (one torch thread: the baseline), and on 1 and 2
Ray Data actors (``attacks.scoring.score_on_ray``, one CPU each). Every way must give the
same scores. Target (issue 18): the figure, and the 2-worker / 1-worker ratio.

    .venv/bin/python benchmarks/mia_throughput.py [--examples 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime

from _common import ROOT, machine, need_data, save_result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=2000)
    args = ap.parse_args()

    import numpy as np
    import ray
    import torch

    from attacks.model import ModelAdapter
    from attacks.scoring import score_on_ray
    from privatize.ray import local_init_args
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    data = need_data() / "customersim" / "train.jsonl"
    texts = [json.loads(line)["text"] for line in open(data, encoding="utf-8")][: args.examples]
    tok = train_tokenizer(texts[:500], 4096)
    model = build_model(preset_config("tiny", vocab_size=len(tok), **special_ids(tok)), seed=0)
    d = tempfile.mkdtemp(prefix="mia-bench-")
    model.save_pretrained(d)
    tok.save_pretrained(d)

    torch.set_num_threads(1)
    a = ModelAdapter.load(d)
    a.token_scores(texts[:32])  # warm-up
    t = time.perf_counter()
    local = a.token_scores(texts)
    local_s = time.perf_counter() - t

    os.environ["PYTHONPATH"] = str(ROOT)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **local_init_args(2))
    rates, pids = {}, {}
    for w in (1, 2):
        score_on_ray(d, texts[:64], workers=w)  # actors' start-up is not throughput
        t = time.perf_counter()
        got, p = score_on_ray(d, texts, workers=w)
        rates[w] = len(texts) / (time.perf_counter() - t)
        pids[w] = len(p)
        diff = max(float(np.abs(x.logprobs - y.logprobs).max()) for x, y in zip(got, local))
        assert diff < 1e-3, f"{w} workers: scores differ from in-process by {diff}"
    res = {"benchmark": "mia_throughput", "date": datetime.now(UTC).strftime("%Y-%m-%d"), "machine": machine(),
           "examples": len(texts), "tokens": sum(len(s.logprobs) for s in local),
           "in_process_1_thread_per_s": round(len(texts) / local_s, 1),
           "ray_1_worker_per_s": round(rates[1], 1), "ray_2_workers_per_s": round(rates[2], 1),
           "ray2_over_ray1": round(rates[2] / rates[1], 2), "ray1_over_in_process": round(rates[1] * local_s / len(texts), 2),
           "worker_processes": pids}
    print(f"MIA scoring, {len(texts)} dialogues: in-process {res['in_process_1_thread_per_s']}/s, "
          f"Ray 1 worker {res['ray_1_worker_per_s']}/s, 2 workers {res['ray_2_workers_per_s']}/s "
          f"({res['ray2_over_ray1']}x)")
    print(json.dumps(res))
    save_result("mia_throughput", res)


if __name__ == "__main__":
    main()
