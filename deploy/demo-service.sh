#!/usr/bin/env bash
# The service demo: start the control plane on the embedded default (SQLite, local files,
# an embedded Ray head), create a tenant, upload a generated corpus, create keys through
# the API, run the CRT preprocessing recipe as a Ray job, wait, download the manifest and
# shards, say where they are, then stop the service and its Ray head.
#
#   ./deploy/demo-service.sh            (from `make`, with the venv's bin first on PATH)
#   DEMO_OUT=/tmp/x DEMO_DOCS=500 ./deploy/demo-service.sh
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${DEMO_OUT:-demo-out/service}
DOCS=${DEMO_DOCS:-300}
PY=${PYTHON:-python}

# `privatize` once the project is installed; the modules otherwise.
if privatize serve --help >/dev/null 2>&1; then
    SVC=(privatize); CORE=(privatize)
else
    SVC=("$PY" -m services.cli); CORE=("$PY" -m privatize.cli)
fi

rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PRIVATIZE_DATA_DIR="$OUT/data"
export PRIVATIZE_MASTER_KEY_FILE="$OUT/master.key"
export RAY_USAGE_STATS_ENABLED=0
unset PRIVATIZE_DATABASE_URL PRIVATIZE_STORAGE_URI PRIVATIZE_RAY_ADDRESS PRIVATIZE_MASTER_KEY || true
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PRIVATIZE_URL="http://127.0.0.1:$PORT"

SERVICE_PID=
cleanup() {
    if [[ -n "$SERVICE_PID" ]] && kill -0 "$SERVICE_PID" 2>/dev/null; then
        kill -TERM "$SERVICE_PID" 2>/dev/null || true
        wait "$SERVICE_PID" 2>/dev/null || true
    fi
    "${SVC[@]}" admin ray stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== master key (a deployment secret: the service and the Ray workers read it from a file)"
"${SVC[@]}" admin master-key new --out "$PRIVATIZE_MASTER_KEY_FILE" >/dev/null

# The operator's part: a public base model every tenant may fine-tune, pre-trained on public text
# only (the 75 Project Gutenberg stories shipped in privatize/data) before the service starts
# (its own local Ray), then added to the service's model catalog (`base:demo-tiny`). A real
# deployment adds a downloaded Hugging Face folder the same way (README: a real base model).
BASE_NAME=demo-tiny
echo "== operator: a public base model (privatize base tiny, Ray Train, about 2 minutes; log: $OUT/base.log)"
"${CORE[@]}" base tiny --output "$OUT/base-tiny" >"$OUT/base.json" 2>"$OUT/base.log" \
    || { tail -20 "$OUT/base.log"; echo "error: the public base did not train (see $OUT/base.log)"; exit 1; }
"$PY" - "$OUT/base.json" <<'PY'
import json, sys
b = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"   {b['steps']} steps in {b['seconds']:.0f} s, loss {b['final_loss']:.2f}, {b['trained_on']}")
PY

echo "== starting the service on $PRIVATIZE_URL (log: $OUT/service.log)"
"${SVC[@]}" serve --port "$PORT" >"$OUT/service.log" 2>&1 &
SERVICE_PID=$!
"$PY" - "$PRIVATIZE_URL" "$SERVICE_PID" <<'PY'
import json, os, sys, time, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 180
while time.time() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the service exited; see service.log")
    try:
        h = json.load(urllib.request.urlopen(url + "/healthz", timeout=2))
        if h.get("ray") == "connected":
            print("   service up, embedded Ray head connected")
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit("the service did not come up in 180 s")
PY

echo "== operator: add the base to the model catalog as '$BASE_NAME' (checked: config.json and safetensors only)"
"${SVC[@]}" admin model add "$BASE_NAME" "$OUT/base-tiny/model" >"$OUT/base-catalog.json"
"$PY" - "$OUT/base-catalog.json" <<'PY'
import json, sys
m = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"   base:{m['name']}  ({m['architecture']}, {m['bytes'] / 1e6:.1f} MB, {m['files']} files)")
PY

echo "== tenant 'demo' (its API token is printed once; only a hash is stored)"
# three jobs at once: the main job trains three models side by side
"${SVC[@]}" admin tenant create demo --max-jobs 3 >"$OUT/tenant.json"
PRIVATIZE_TOKEN=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["token"])' "$OUT/tenant.json")
export PRIVATIZE_TOKEN

echo "== corpus with fake PII ($DOCS documents)"
"${CORE[@]}" make-corpus --out "$OUT/corpus.jsonl" --docs "$DOCS" --seed 0

echo "== keys (created by the service, sealed under the master key; the API never returns them)"
"$PY" - "$OUT" <<'PY'
import json, os, sys
from pathlib import Path

from privatize.stages import registered_kinds
from services.client import ServiceClient

out = Path(sys.argv[1])
with ServiceClient(os.environ["PRIVATIZE_URL"], os.environ["PRIVATIZE_TOKEN"]) as c:
    keys = {"text": c.create_key("vigenere", length=100, label="whole-text cipher"),
            "entities": c.create_key("aes-siv", label="entity tokens"),
            "pseudonym": c.create_key("hmac", label="individual_id pseudonyms")}
for name, k in keys.items():
    print(f"   {name:<10} {k['ref']}  ({k['kind']})")
stages = [{"kind": "split", "unit": "sentence"}]
if "redact" in registered_kinds():
    # CRT with entity encryption: detected entities become AES-SIV tokens; then every
    # flagged sentence is deduplicated, however short (privatize/specs/crt.yaml)
    from privatize.recipes import crt_stages

    stages = crt_stages(operator="encrypt", key=keys["entities"]["ref"])
    recipe = "split, redact (encrypt entities), dedup of flagged sentences, split_private"
else:
    stages += [{"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask", "min_length": 20},
               {"kind": "split_private"}, {"kind": "encrypt_text", "key": keys["text"]["ref"]}]
    recipe = "split, dedup, split_private, encrypt_text (the redact stage is not in this tree yet)"
spec = {"version": 1, "stages": stages,
        "output": {"num_shards": 4, "pseudonym_key": keys["pseudonym"]["ref"]}}
(out / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")
print(f"   recipe: {recipe}")
PY

echo "== privatize submit: upload, run as a Ray job, wait, download"
"${SVC[@]}" submit "$OUT/spec.json" --corpus "$OUT/corpus.jsonl" --wait --poll 1 --download "$OUT/result" \
    | tee "$OUT/summary.json"
"${CORE[@]}" verify "$OUT/result" >/dev/null

"$PY" - "$OUT" <<'PY'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
s = json.loads((out / "summary.json").read_text().strip().splitlines()[-1])
m = json.loads((out / "result" / "manifest.json").read_text())
print()
print("Service demo finished.")
print(f"  job:        {s['job_id']} ({s['status']})")
print(f"  manifest:   {(out / 'result' / 'manifest.json')}")
print(f"  shards:     {(out / 'result' / 'shards')}  ({len(m['shards'])} files, "
      f"{m['counts']['output_records']} records)")
print(f"  service:    data {out / 'data'}, log {out / 'service.log'}")
for st in m["stages"]:
    stats = {k: v for k, v in st["stats"].items() if v and not k.startswith("entities.")}
    print(f"  stage {st['index']} {st['kind']:<14} {st['records_in']:>6} -> {st['records_out']:<6} {stats}")
PY
echo
echo "== the main job: upload with canaries -> privatize -> train three models -> attack -> report"
"$PY" deploy/main_job.py "$OUT/main" --base "$BASE_NAME"
echo "== stopping the service and its Ray head"
