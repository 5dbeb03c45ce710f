#!/usr/bin/env bash
# CRT's own experiment (experiments/crt_paper.py) with the `small` preset on the full
# CustomerSim training split, on one GPU (issue 37), in ONE device call.
#
#   bash experiments/device_crt.sh prepare   # here: Presidio privatizes the full set (CPU, long)
#   bash experiments/device_crt.sh bundle    # here: builds .devcrt/ (what the device lacks; `site`: the wheels alone)
#   bash experiments/device_crt.sh remote    # there: the device call's command
#
# The device machine has PyTorch and CUDA but neither Ray nor pydantic, no Presidio/spaCy,
# and no ../shared. So the privatization runs here (`crt_paper.py --prepare`: canaries,
# split, redaction at gamma 0 / 0.1 / 0.3, dedup, split_private, held-out sentences), and
# `bundle` packs
#   .devcrt/site.tar.xz    the cp312 wheels the training and the attacks import that the
#                          device lacks, at constraints.txt's versions (Ray without its Java
#                          jars, RLlib, Serve, LLM and the dashboard's web client; pydantic;
#                          Opacus; transformers, as pinned here), installed into one tree
#   .devcrt/work.tar.xz    the --work folder (key, shards, held-out text, public text)
#   .devcrt/public.tar.xz  the public sources the base's cache is keyed on (../shared/data)
# `remote` unpacks them, pre-trains base-small on the GPU, fine-tunes the models of $MODELS
# in that order at batch $BATCH (the paper's 256; $DP_BATCH, if set, the DP steps' batch:
# dp.batch_size, 32 was CRT's best on the CPU) until $BUDGET seconds have gone, scores
# every trained model on the GPU, and writes to $OUT:
#   crt_gpu.log                 versions, GPU, the benchmark's output
#   crt_paper_gpu.json          the rows (benchmarks/results/ when copied back)
#   crt_paper_gpu_customersim_fig{2,3,4}.png
#   scoring_devices.json        GPU scoring against the CPU
#   runs.tgz                    each run's summary.json and metrics.jsonl, evaluation.json
#   ray_logs.tgz                Ray's session logs, only when the benchmark failed
# Device call: command `bash experiments/device_crt.sh remote`, carry [".devcrt"], timeout_s 600.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
BUNDLE=.devcrt
WORK=${WORK:-benchmarks/work/crt_gpu}
DIALOGUES=${DIALOGUES:-10000}

prepare() {
  .venv/bin/python -m experiments.crt_paper --dataset customersim --dialogues "$DIALOGUES" --work "$WORK" --prepare
}

site() {
  set -e
  local py312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python3.12}
  local build=${BUILD:-/tmp/devcrt-build}
  mkdir -p "$BUNDLE"
  # shellcheck source=benchmarks/_device.sh
  source benchmarks/_device.sh
  pinned_site "$build/site" "$py312" ray jsonschema jsonschema-specifications referencing rpds-py pydantic \
    pydantic-core annotated-types typing-inspection typing-extensions opacus transformers colorful wcwidth \
    jsonpointer rfc3339-validator
  (
    cd "$build/site"
    rm -rf bin ray/jars ray/rllib ray/serve ray/llm ray/dashboard/client ray/tune/examples ray/train/examples \
      transformers/models/*/convert_* opacus/tests
    find . -name __pycache__ -prune -exec rm -rf {} +
    find . -type f -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
    strip --strip-unneeded ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet
  )
  du -sh "$build/site"
  tar -C "$build/site" -cf - . | nice -n 19 xz -9 -T0 > "$BUNDLE/site.tar.xz.tmp"
  mv "$BUNDLE/site.tar.xz.tmp" "$BUNDLE/site.tar.xz"
}

bundle() {
  set -e
  grep -qx "/$BUNDLE/" .git/info/exclude 2>/dev/null || echo "/$BUNDLE/" >> .git/info/exclude
  [ -f "$BUNDLE/site.tar.xz" ] || site   # the wheels change only with constraints.txt: rm .devcrt to rebuild
  tar -C "$WORK/.." --exclude='*/runs' --exclude='*/eval' --exclude='base-*' -cf - "$(basename "$WORK")" \
    | xz -9 -T0 > "$BUNDLE/work.tar.xz"
  tar -C ../shared/data -cf - wikitext2_tokenized/valid.txt wikitext2_tokenized/test.txt \
    squality_gutenberg/train.jsonl squality_gutenberg/dev.jsonl | xz -9 -T0 > "$BUNDLE/public.tar.xz"
  ls -l "$BUNDLE"
  local tree
  tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  echo "travels: working tree $((tree / 1048576)) MiB + $BUNDLE $(($(du -sb "$BUNDLE" | cut -f1) / 1048576)) MiB" \
    "(limit 64 MiB)"
}

remote() {
  OUT=${OUT:-/tmp/devcrt-out}
  mkdir -p "$OUT"
  local t0=$SECONDS log="$OUT/crt_gpu.log"
  mkdir -p /tmp/site "$(dirname "$WORK")" ../shared/data || exit 1
  python3 - "$BUNDLE" "$(dirname "$WORK")" <<'EOF' || exit 1
import sys, tarfile
b, work = sys.argv[1:]
for name, dest in (("site", "/tmp/site"), ("work", work), ("public", "../shared/data")):
    tarfile.open(f"{b}/{name}.tar.xz").extractall(dest, filter="fully_trusted")
EOF
  export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 \
    HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false CUBLAS_WORKSPACE_CONFIG=:4096:8
  {
    echo "unpacked in $((SECONDS - t0)) s; $(nproc) CPUs"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 - <<'EOF'
import importlib.metadata as md, sys
print("python", sys.version.split()[0], sys.executable)
for n in ("torch", "ray", "opacus", "transformers", "tokenizers", "huggingface_hub", "pydantic", "pyarrow", "numpy",
          "pandas", "safetensors", "peft", "matplotlib"):
    try:
        print(f"  {n} {md.version(n)}  ({md.distribution(n).locate_file('')})")
    except md.PackageNotFoundError:
        print(f"  {n} MISSING")
import torch, ray.train.torch, opacus, pydantic, train.run, attacks.run  # noqa: E401,F401 - fail here, not later
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
EOF
  } 2>&1 | tee "$log" || exit 1
  # GPU scoring is checked against the CPU on a tiny model first (seconds); if they disagree
  # or it fails, the models are scored on the CPU
  local score=cuda
  timeout 120 python3 -W ignore benchmarks/scoring_devices.py 2>&1 | grep -v "Loading weights\|Writing model" | tee -a "$log" \
    || score=cpu
  timeout "${LIMIT:-500}" python3 -W ignore -m experiments.crt_paper --score-device "$score" --dataset customersim --dialogues "$DIALOGUES" \
    --preset small --gpu --batch-size "${BATCH:-256}" --epochs "${EPOCHS:-10}" --work "$WORK" \
    --models "${MODELS:-plain,crt-e3-g0.1,redacted-g0.1,crt-e8-g0.1,crt-e1-g0.1,dp-e3,crt-e3-g0,crt-e3-g0.3,redacted-g0,redacted-g0.3,dp-e8,dp-e1}" \
    ${DP_BATCH:+--dp-batch-size "$DP_BATCH"} --budget "${BUDGET:-270}" --name crt_paper_gpu 2>&1 | tee -a "$log"
  local rc=$?
  cp benchmarks/results/crt_paper_gpu.json benchmarks/results/crt_paper_gpu_customersim_fig*.png \
    benchmarks/results/scoring_devices.json "$OUT/" 2>/dev/null
  (cd "$(dirname "$WORK")" && shopt -s nullglob && w=$(basename "$WORK") \
    && tar -czf "$OUT/runs.tgz" "$w"/*/runs/*/summary.json "$w"/*/runs/*/metrics.jsonl "$w"/*/eval/evaluation.json \
      "$w"/base-*/summary.json)
  if [ $rc -ne 0 ]; then
    echo "benchmark exit status $rc" | tee -a "$log"
    tar -czf "$OUT/ray_logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null
  fi
  echo "whole command $((SECONDS - t0)) s" | tee -a "$log"
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  site) site ;;
  bundle) bundle ;;
  remote) remote ;;
  *) echo "usage: $0 prepare|bundle|remote" >&2; exit 2 ;;
esac
