"""The main job, over the service's REST API: upload, privatize, train, attack, report.

Run by ``deploy/demo-service.sh`` (``make demo``) against a running service
(``PRIVATIZE_URL``, ``PRIVATIZE_TOKEN``), or by hand against any deployment:

    python deploy/main_job.py OUT_DIR [--docs 60] [--epochs 30]

1. a corpus with fake PII (and a held-out corpus from the same generator) over HTTP;
2. two privatization jobs, both first inserting 10 secret canaries ``My ID is: <4 digits>``
   20 times each (the ``canaries`` stage; the secrets derive from an hmac key the service
   made, and appear nowhere): ``raw`` (canaries only) and ``crt`` (canaries, sentence
   split, dedup, Presidio redaction to ``<MASK>``, the public/private split);
3. three tiny models (Ray Train): plain on the raw text, plain on the redacted text, and
   CRT (plain steps on the public split, DP-SGD on the private one);
4. one evaluation of the three: exact canary exposure over all 10^4 candidates,
   membership inference (the uploaded records vs held-out ones), perplexity on held-out
   text; its report downloaded to ``OUT_DIR/report``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

CANARIES = {"digits": 4, "count": 10, "repeats": 20, "held_out": 10}


def _train_config(kind: str, epochs: int) -> dict:
    cfg = {"version": 1, "kind": kind, "data": {"seq_len": 64}, "model": {"preset": "tiny"},
           "tokenizer": {"vocab_size": 1024}, "optim": {"batch_size": 16, "epochs": epochs, "lr": 0.005,
                                                       "warmup_steps": 10},
           "workers": {"num_workers": 1}, "checkpoint_every": 100000, "report_every": 20}
    if kind == "crt":
        # gamma, delta_2: measured on customersim's gold spans (benchmarks/RESULTS.md)
        cfg.update(dp={"target_epsilon": 1.0, "max_grad_norm": 1.0, "grad_sample_mode": "ghost"},
                   crt={"gamma": 0.0382, "delta_2": 0.0033,
                        "source": "customersim held-out gold spans, one-sided 95% upper bounds "
                                  "(benchmarks/pi_c_curve.py, benchmarks/RESULTS.md)"})
    return cfg


def _wait_all(c, ids: dict[str, str], what: str) -> dict[str, dict]:
    done: dict[str, dict] = {}
    t0 = time.time()
    while len(done) < len(ids):
        for name, i in ids.items():
            if name in done:
                continue
            j = c.job(i)
            if j["status"] in ("succeeded", "failed", "cancelled"):
                done[name] = j
                print(f"   {what} {name:<9} {j['status']} after {time.time() - t0:.0f} s", flush=True)
                if j["status"] != "succeeded":
                    sys.exit(f"{what} {name} ({i}) {j['status']}: {j.get('error') or ''}\n"
                             f"logs: privatize logs {i}")
        time.sleep(2)
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args()

    from privatize.corpus import make_corpus
    from services.client import ServiceClient

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    make_corpus(out / "train.jsonl", n_docs=args.docs, seed=0)
    make_corpus(out / "heldout.jsonl", n_docs=200, seed=9)
    with ServiceClient(os.environ["PRIVATIZE_URL"], os.environ["PRIVATIZE_TOKEN"]) as c:
        print(f"== main job 1/4: upload ({args.docs} documents to train on, 200 held out)", flush=True)
        train_c = c.upload_corpus(out / "train.jsonl", name="main-train")
        held_c = c.upload_corpus(out / "heldout.jsonl", name="main-heldout")
        key = c.create_key("hmac", label="canaries")
        canaries = {"kind": "canaries", "key": key["ref"], **CANARIES}

        print("== main job 2/4: privatize (raw + canaries; CRT recipe + canaries) as Ray jobs", flush=True)
        specs = {"raw": {"version": 1, "stages": [canaries]},
                 "crt": {"version": 1, "stages": [
                     canaries, {"kind": "split", "unit": "sentence"},
                     {"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask", "min_length": 20},
                     {"kind": "redact", "operator": "mask"}, {"kind": "split_private"}]}}
        jobs = {name: c.create_job(train_c["id"], spec)["id"] for name, spec in specs.items()}
        _wait_all(c, jobs, "job")

        print(f"== main job 3/4: train three tiny models ({args.epochs} epochs each, Ray Train)", flush=True)
        plan = {"plain": (jobs["raw"], "pretrain"), "redacted": (jobs["crt"], "pretrain"),
                "crt": (jobs["crt"], "crt")}
        trainings = {name: c.create_training(job, _train_config(kind, args.epochs))["id"]
                     for name, (job, kind) in plan.items()}
        _wait_all(c, trainings, "training")

        print("== main job 4/4: attack the three models, one report", flush=True)
        protection = {"plain": "none: raw text with canaries",
                      "redacted": "split, dedup, Presidio redaction to <MASK> (all text trained plainly)",
                      "crt": "CRT: split, dedup, redaction; public split plain, private split DP-SGD"}
        ev_cfg = {"version": 1,
                  "models": [{"name": n, "training_id": t, "protection": protection[n]} for n, t in trainings.items()],
                  "canaries": {"key": key["ref"], **CANARIES},
                  "mia": {"members": {"corpus_id": train_c["id"]}, "non_members": {"corpus_id": held_c["id"]},
                          "limit": 200, "group_size": 10},
                  "perplexity": {"data": {"corpus_id": held_c["id"]}, "limit": 200}}
        ev = c.create_evaluation(ev_cfg)
        _wait_all(c, {"attacks": ev["id"]}, "evaluation")
        paths = c.download_report(ev["id"], out / "report")
        summary = c.evaluation(ev["id"])

    ev_json = json.loads(paths[1].read_text())
    print()
    print(f"Main job finished in {time.time() - t_start:.0f} s: privacy against utility of the three models")
    print(f"  {'model':<9} {'perplexity':>10} {'max exposure':>13} {'mean exposure':>14} {'MIA AUC (loss)':>15} "
          f"{'TPR@1%FPR':>10}")
    for m in ev_json["models"]:
        x, mia = m["exposure"], {r["score"]: r for r in m["mia"]["scores"]}
        print(f"  {m['name']:<9} {m['perplexity']:>10.1f} {x['max_exposure']:>13.2f} {x['mean_exposure']:>14.2f} "
              f"{mia['loss']['auc']:>15.3f} {mia['loss']['tpr_at'][0]['tpr']:>10.3f}")
    print(f"  (exposure in bits of at most log2 10^4 = 13.29; never-inserted canaries reach "
          f"{max(m['exposure']['max_reference_exposure'] for m in ev_json['models']):.2f})")
    print(f"  evaluation: {summary['id']} ({summary['status']})")
    print(f"  report:     {paths[0].resolve()}")
    print(f"  results:    {paths[1].resolve()}")
    (out / "main-job.json").write_text(json.dumps({"jobs": jobs, "trainings": trainings, "evaluation": ev["id"],
                                                   "report": str(paths[0].resolve()),
                                                   "seconds": round(time.time() - t_start)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
