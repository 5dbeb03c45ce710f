#!/usr/bin/env bash
# Entity-graph synthesis (issue 20) on the embedded default, with no network: a tiny
# causal LM the project trains itself is served by `transformers serve` (an
# OpenAI-compatible server) on loopback, and a small sample of the demo corpus goes
# through redact (AES-SIV entity tokens) then synthesize against it. A tiny model writes
# nonsense, so few samples pass the instruction checks: this shows the mechanics (the
# requests, the graph, the checks, the cache); point llm.base_url and llm.model at vLLM or
# a hosted API for real text (see README).
#
# With PRIVATIZE_LLM_URL set (an OpenAI-compatible base URL such as http://localhost:8000/v1)
# no model is trained or served here: the same sample goes to that endpoint instead, as
# model PRIVATIZE_LLM_MODEL (default: the first one its /models lists), with the API key
# named by reference (api_key: env:PRIVATIZE_LLM_API_KEY) when that variable is set. At most
# 100 requests are sent (max_requests).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DEMO_OUT:-demo-out/synthesis}
rm -rf "$OUT"
mkdir -p "$OUT/keys"
if command -v privatize >/dev/null; then P=(privatize); else P=(python -m privatize.cli); fi

"${P[@]}" make-corpus --out "$OUT/corpus.jsonl" --docs 200 --seed 3 >/dev/null
head -n 4 "$OUT/corpus.jsonl" > "$OUT/sample.jsonl"
mkdir -p "$OUT/input" && mv "$OUT/sample.jsonl" "$OUT/input/"
"${P[@]}" keys new --kind aes-siv --out "$OUT/keys/entity.key" >/dev/null

LLM_URL=${PRIVATIZE_LLM_URL:-}
if [[ -n "$LLM_URL" ]]; then
  [[ "$LLM_URL" =~ ^https?://[^\"]+$ ]] || { echo "PRIVATIZE_LLM_URL must be an http(s):// URL" >&2; exit 2; }
  BASE_URL=${LLM_URL%/}
  MODEL=${PRIVATIZE_LLM_MODEL:-}
  if [[ -z "$MODEL" ]]; then
    MODEL=$(python - "$BASE_URL" <<'PY'
import json, os, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/models")
if os.environ.get("PRIVATIZE_LLM_API_KEY"):
    req.add_header("Authorization", "Bearer " + os.environ["PRIVATIZE_LLM_API_KEY"])
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(json.load(r)["data"][0]["id"])
except Exception as exc:
    sys.exit(f"cannot list the models of {sys.argv[1]} ({type(exc).__name__}); set PRIVATIZE_LLM_MODEL")
PY
)
  fi
  API_KEY=
  [[ -n "${PRIVATIZE_LLM_API_KEY:-}" ]] && API_KEY=", api_key: env:PRIVATIZE_LLM_API_KEY"
  MAX_TOKENS=512 MAX_REQUESTS=100
  echo "-- the endpoint $BASE_URL, model $MODEL"
else
echo "-- a tiny causal LM (150 steps on the demo corpus)"
cat > "$OUT/train.yaml" <<YAML
version: 1
kind: pretrain
data: {path: corpus.jsonl, text_column: text, seq_len: 128}
model: {preset: tiny}
tokenizer: {vocab_size: 2048}
optim: {batch_size: 16, epochs: 100, max_steps: 150, lr: 0.003, warmup_steps: 10}
workers: {num_workers: 1, cpus_per_worker: 1}
checkpoint_every: 1000
report_every: 1000
YAML
(cd "$OUT" && "${P[@]}" train train.yaml --output model-run >/dev/null 2>&1)
python - "$OUT/model-run/model" <<'PY'
import sys
from transformers import AutoTokenizer
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d)
tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                     "{% if add_generation_prompt %}assistant: {% endif %}")
tok.save_pretrained(d)
PY

PORT=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MODEL=$(cd "$OUT/model-run/model" && pwd)
echo "-- transformers serve $MODEL on 127.0.0.1:$PORT"
HF_HUB_OFFLINE=1 transformers serve "$MODEL" --host 127.0.0.1 --port "$PORT" --device cpu > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { tail -20 "$OUT/serve.log"; exit 1; }
  sleep 0.5
done
BASE_URL="http://127.0.0.1:$PORT/v1"
API_KEY=
MAX_TOKENS=48 MAX_REQUESTS=null
fi

cat > "$OUT/spec.yaml" <<YAML
version: 1
stages:
  - kind: redact
    operator: encrypt
    key: file:keys/entity.key
  - kind: synthesize
    max_entities: 4
    max_k: 3
    cache: llm-cache
    max_requests: $MAX_REQUESTS
    llm: {base_url: "$BASE_URL", model: "$MODEL", max_tokens: $MAX_TOKENS, max_in_flight: 8$API_KEY}
YAML
echo "-- privatize run: redact (encrypt) then synthesize, 4 articles"
"${P[@]}" run "$OUT/spec.yaml" --input "$OUT/input" --output "$OUT/result" > "$OUT/summary.json"
"${P[@]}" run "$OUT/spec.yaml" --input "$OUT/input" --output "$OUT/rerun" > "$OUT/rerun.json"
python - "$OUT" <<'PY'
import json, sys, pathlib
import pyarrow.parquet as pq
out = pathlib.Path(sys.argv[1])
m = json.loads((out / "result" / "manifest.json").read_text())
s = next(x["stats"] for x in m["stages"] if x["kind"] == "synthesize")
again = next(x["stats"] for x in json.loads((out / "rerun" / "manifest.json").read_text())["stages"]
             if x["kind"] == "synthesize")
print(f"  {s['requests']} requests ({s['tokens_in']} tokens in, {s['tokens_out']} out); pair scores unreadable: "
      f"{s['score_missing'] + s['score_out_of_range']}; edges {s['edges']}, tuples {s['tuples']}")
print(f"  samples kept {s['samples']}; filtered: empty {s['filtered_empty']}, format {s['filtered_format']}, "
      f"entities {s['filtered_entities']}; synthetic words per source word "
      f"{s['synthetic_words'] / max(1, s['source_words']):.3f}")
print(f"  the re-run answered {again['requests_cached']} of {again['requests']} requests from the cache")
rows = [r for f in sorted((out / "result" / "shards").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
syn = [r for r in rows if r.get("synthesis_source")]
if syn:
    print(f"  a synthetic record ({syn[0]['synthesis_prompt']} of {syn[0]['synthesis_entities']}): {syn[0]['text'][:120]!r}")
print(f"Synthesis demo: shards in {(out / 'result').resolve()}, answers cached in {(out / 'llm-cache').resolve()}")
PY
