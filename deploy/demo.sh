#!/usr/bin/env bash
# `make demo`: generate a corpus with fake PII, make keys, run the CRT preprocessing recipe
# (split, dedup, split_private, whole-text cipher) on the embedded default (in-process),
# verify, and say where everything is.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=demo-out
rm -rf "$OUT"
mkdir -p "$OUT/keys"
privatize make-corpus --out "$OUT/corpus.jsonl" --docs 300 --seed 0
privatize keys new --kind vigenere --length 100 --out "$OUT/keys/text.key"
privatize keys new --kind hmac --out "$OUT/keys/pseudonym.key"
cp privatize/specs/crt.yaml "$OUT/spec.yaml"
privatize run "$OUT/spec.yaml" --input "$OUT/corpus.jsonl" --output "$OUT/result" | tee "$OUT/summary.json"
privatize verify "$OUT/result" >/dev/null
python - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
m = json.loads((out / "result" / "manifest.json").read_text())
print()
print("Demo finished.")
print(f"  corpus:     {(out / 'corpus.jsonl').resolve()}")
print(f"  shards:     {(out / 'result' / 'shards').resolve()}  ({len(m['shards'])} files, {m['counts']['output_records']} records)")
print(f"  manifest:   {(out / 'result' / 'manifest.json').resolve()}")
print(f"  quarantine: {m['quarantine']['path'] or 'none (no record was quarantined)'}")
for s in m["stages"]:
    print(f"  stage {s['index']} {s['kind']:<14} {s['records_in']:>6} -> {s['records_out']:<6} {s['stats']}")
PY
