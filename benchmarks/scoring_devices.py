"""The attacks scored on each device this machine has must agree: a tiny random model,
perplexity, exact canary exposure (3 digits) and membership inference, scored on the CPU
and, where there is one, on the GPU (``scoring.device: cuda``). Prints each device's
figures and exits non-zero when they differ by more than float rounding. A check that
takes seconds, run before a GPU benchmark (``device_crt.sh``) relies on GPU scoring.

    python benchmarks/scoring_devices.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def main() -> int:
    import torch

    from _common import machine, save_result
    from attacks.config import parse_config
    from attacks.run import run_evaluation
    from privatize.keys import new_key, write_key_file
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    d = Path(tempfile.mkdtemp(prefix="scoring-devices-"))
    tok = train_tokenizer([f"My ID is: {i:03d}. USR: Ok, it is {i} Elm Street." for i in range(300)], 300)
    build_model(preset_config("tiny", vocab_size=len(tok), **special_ids(tok)), seed=1).save_pretrained(d / "m")
    tok.save_pretrained(d / "m")
    write_key_file(new_key("hmac"), d / "k")
    (d / "held.txt").write_text("My ID is: 123.\nUSR: Ok, it is 9 Elm Street.\n")
    for side, n in (("mem", 0), ("non", 50)):
        (d / f"{side}.jsonl").write_text("".join(json.dumps({"text": f"{n + i} Elm Street"}) + "\n" for i in range(20)))
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    got = {}
    for dev in devices:
        ev = run_evaluation(parse_config({
            "models": [{"name": "t", "path": str(d / "m")}], "perplexity": {"data": str(d / "held.txt")},
            "canaries": {"key": f"file:{d / 'k'}", "digits": 3, "count": 2, "held_out": 2, "repeats": 1},
            "mia": {"members": str(d / "mem.jsonl"), "non_members": str(d / "non.jsonl"), "limit": 20,
                    "group_size": 5, "context": "USR: Ok, it is {text}."},
            "scoring": {"device": dev}, "output": str(d / f"ev-{dev}")}), progress=False)
        m = ev.models[0]
        got[dev] = {"perplexity": m.perplexity, "max_exposure": m.exposure.max_exposure,
                    "mia_auc": {r.score: r.auc for r in m.mia.scores}}
        print(dev, json.dumps(got[dev]), flush=True)
    close = None
    if "cuda" in got:
        a, b = got["cpu"], got["cuda"]
        close = (abs(a["perplexity"] / b["perplexity"] - 1) < 1e-3 and abs(a["max_exposure"] - b["max_exposure"]) < 0.05
                 and all(abs(a["mia_auc"][k] - b["mia_auc"][k]) < 0.05 for k in a["mia_auc"]))
        print("cpu and cuda agree" if close else "cpu and cuda DIFFER", flush=True)
    else:
        print("no CUDA device: the CPU figures only", flush=True)
    result = {"machine": machine(), "devices": devices, "scores": got, "agree": close}
    if "cuda" in got:
        result["gpu"] = torch.cuda.get_device_name(0)
    print(f"saved {save_result('scoring_devices', result)}", flush=True)
    return 0 if close in (None, True) else 1


if __name__ == "__main__":
    sys.exit(main())
