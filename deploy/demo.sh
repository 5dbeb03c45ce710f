#!/usr/bin/env bash
# `make demo`, on the embedded default (local Ray, SQLite, local files):
#   1. the batch CLI: generate a corpus with fake PII, make keys, run the CRT recipe
#      (split, dedup, redact with AES-SIV entity tokens, split_private) in-process, verify;
#   2. the service: start the control plane with an embedded Ray head, create a demo
#      tenant, upload the same kind of corpus over HTTP, run the CRT recipe with entity
#      encryption as a Ray job, download the result (deploy/demo-service.sh); then the
#      main job over the same API (deploy/main_job.py): a corpus with canaries ->
#      privatize -> three tiny models (plain, redacted, CRT) -> attacks -> one report;
#   3. synthesis: redact then synthesize a small sample against `transformers serve` of a
#      tiny model trained here (deploy/synthesis-demo.sh; no network).
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
print("Batch run finished (CRT recipe: split, dedup, redact -> AES-SIV entity tokens, split_private).")
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
echo "== 3. synthesis against a local OpenAI-compatible server (transformers serve)"
DEMO_OUT="$OUT/synthesis" ./deploy/synthesis-demo.sh
echo
echo "Demo outputs: $(cd "$OUT" && pwd)/batch (CLI run), $(cd "$OUT" && pwd)/service (service run) and"
echo "  $(cd "$OUT" && pwd)/synthesis (synthesis run)."
echo "The privacy report of the main job: $(cd "$OUT" && pwd)/service/main/report/report.html"
