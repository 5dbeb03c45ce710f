#!/usr/bin/env bash
# The GPU figures of issues 17 and 21 in one run, on a machine with a CUDA device and the
# project's dependencies (or the workplace's device machine: PyTorch there, the rest
# carried as wheels in .whl/, installed into /tmp/site).
#   .gpu/wikitext2_tokenized   ../shared/data/wikitext2_tokenized copied (the device
#                              machine does not see ../shared)
#   .gpu/filler                a masked-LM filler (privatize train train/configs/tiny-mlm.yaml)
#   .gpu/allow5000.txt         the allow list as a file (wordfreq's 5,000 most frequent
#                              English words; wordfreq's wheel is too large to carry)
# Writes its outputs to $OUT (default benchmarks/results/gpu).
set -o pipefail
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false CUBLAS_WORKSPACE_CONFIG=:4096:8
PY=${PY:-python3}
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
if [ ! -d ../shared/data/wikitext2_tokenized ]; then
  mkdir -p ../shared/data && cp -r .gpu/wikitext2_tokenized ../shared/data/
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, transformers, opacus; print('torch', torch.__version__, 'transformers', transformers.__version__, 'opacus', opacus.__version__)" | tee -a "$OUT/gpu.txt"
timeout "${TRAIN_TIMEOUT:-420}" $PY -W ignore benchmarks/gpu_train.py --json "$OUT/gpu_train.json" 2>&1 | tee "$OUT/gpu_train.txt"
timeout "${REFILL_TIMEOUT:-150}" $PY -W ignore benchmarks/refill_throughput.py --gpu --sentences 2000 \
  --filler .gpu/filler --word-list .gpu/allow5000.txt 2>&1 | grep -v "Loading weights" | tee "$OUT/refill_gpu.txt"
cp benchmarks/results/refill_throughput_gpu.json "$OUT/" 2>/dev/null || true
