#!/usr/bin/env bash
# `make demo`, on the embedded default (local Ray, SQLite, local files):
#   1. the batch CLI: generate a corpus with fake PII, make keys, run the CRT recipe
#      (split, redact with AES-SIV entity tokens, dedup, split_private) in-process, verify;
#   2. the service: start the control plane with an embedded Ray head, create a demo
#      tenant, upload the same kind of corpus over HTTP, run the CRT recipe with entity
#      encryption as a Ray job, download the result (deploy/demo-service.sh); then the
#      main job over the same API (deploy/main_job.py): a corpus with canaries ->
#      privatize -> three tiny models (plain, redacted, CRT) -> attacks -> one report;
#   3. synthesis, only when an LLM endpoint is configured: PRIVATIZE_LLM_URL (an
#      OpenAI-compatible base URL), optionally PRIVATIZE_LLM_MODEL and PRIVATIZE_LLM_API_KEY:
#      redact then synthesize a small sample against it (deploy/synthesis-demo.sh). A tiny
#      model trained here cannot follow the prompts, so without an endpoint it is skipped.
# Then say where everything is.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=demo-out
rm -rf "$OUT"
mkdir -p "$OUT/batch/keys"
B="$OUT/batch"
if command -v privatize >/dev/null; then P=(privatize); else P=(python -m privatize.cli); fi

echo "== 1. batch CLI, in-process runner"
"${P[@]}" make-corpus --out "$B/corpus.jsonl" --docs 300 --seed 0
"${P[@]}" keys new --kind aes-siv --out "$B/keys/entity.key"
"${P[@]}" keys new --kind hmac --out "$B/keys/pseudonym.key"
cp privatize/specs/crt.yaml "$B/spec.yaml"
"${P[@]}" run "$B/spec.yaml" --input "$B/corpus.jsonl" --output "$B/result" | tee "$B/summary.json"
"${P[@]}" verify "$B/result" >/dev/null
python - "$B" <<'PY'
import json, sys, pathlib
import pyarrow.parquet as pq
out = pathlib.Path(sys.argv[1])
m = json.loads((out / "result" / "manifest.json").read_text())
print()
print("Batch run finished (CRT recipe: split, redact -> AES-SIV entity tokens, dedup, split_private).")
print(f"  corpus:     {(out / 'corpus.jsonl').resolve()}")
print(f"  shards:     {(out / 'result' / 'shards').resolve()}  ({len(m['shards'])} files, {m['counts']['output_records']} records)")
print(f"  manifest:   {(out / 'result' / 'manifest.json').resolve()}")
print(f"  quarantine: {m['quarantine']['path'] or 'none (no record was quarantined)'}")
for s in m["stages"]:
    stats = {k: v for k, v in s["stats"].items() if v and not k.startswith("entities.")}
    print(f"  stage {s['index']} {s['kind']:<14} {s['records_in']:>6} -> {s['records_out']:<6} {stats}")
t = pq.read_table(out / "result" / m["shards"][0]["file"], columns=["text", "private"]).to_pylist()
sample = next((r for r in t if "_[" in r["text"]), t[0])
print(f"  a record:   {sample['text'][:160]!r} (private={sample['private']})")
(out / "sample.txt").write_text(sample["text"], encoding="utf-8")
PY
PLAIN=$("${P[@]}" decrypt --key "$B/keys/entity.key" < "$B/sample.txt" 2>"$B/decrypt-report.txt")
echo "  decrypted:  '$PLAIN' ($(tr -d '\n' < "$B/decrypt-report.txt"))"

echo
echo "== 2. the service (FastAPI + embedded Ray head): upload, job, download"
DEMO_OUT="$OUT/service" ./deploy/demo-service.sh
echo
if [[ -n "${PRIVATIZE_LLM_URL:-}" ]]; then
  echo "== 3. synthesis against the LLM endpoint in PRIVATIZE_LLM_URL"
  DEMO_OUT="$OUT/synthesis" ./deploy/synthesis-demo.sh
else
  echo "== 3. synthesis: skipped (no LLM endpoint configured; a tiny local model cannot follow its prompts)"
  echo "  To run it, serve a chat model with vLLM (\`vllm serve MODEL\`), then: PRIVATIZE_LLM_URL=http://localhost:8000/v1 make demo"
  echo "  A hosted OpenAI-compatible API: PRIVATIZE_LLM_URL=<its base URL> PRIVATIZE_LLM_MODEL=<model> and the key in"
  echo "  PRIVATIZE_LLM_API_KEY (the spec names it as env:PRIVATIZE_LLM_API_KEY; the key is never written or printed)."
fi
echo
A=$(cd "$OUT" && pwd)
if [[ -d "$OUT/synthesis" ]]; then
  echo "Demo outputs: $A/batch (CLI run), $A/service (service run) and $A/synthesis (synthesis run)."
else
  echo "Demo outputs: $A/batch (CLI run) and $A/service (service run)."
fi
echo "The privacy report of the main job: $A/service/main/report/report.html"
