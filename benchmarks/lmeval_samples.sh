#!/usr/bin/env bash
# Make the real lm-evaluation-harness sample files that tests/data/lmeval/ holds.
#
# Two lm-eval runs of GSM8K (zero-shot, the first N test items, --log_samples) against
# `python -m llama_cpp.server` serving the embedded SmolLM2-135M GGUF, one thread:
#   a: the default f16 KV cache;  b: flash attention with a q8_0 KV cache.
# lm-eval cannot reach the hub here, so the task is lm-eval's own gsm8k.yaml pointed at
# the local GSM8K test file (../shared/data/gsm8k/test.jsonl) with num_fewshot 0.
#
# Needs: .venv (abgate with the server extra) and a separate lm-eval venv:
#   python3 -m venv .lmeval-venv && .lmeval-venv/bin/pip install 'lm-eval[api]==0.4.13'
# Usage: bash benchmarks/lmeval_samples.sh [LIMIT] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-5}
OUT=${2:-tests/data/lmeval}
DATA=$(realpath ../shared/data/gsm8k/test.jsonl)
GGUF=$(.venv/bin/python -c "from abgate.engines.llamacpp.engine import default_model_path; print(default_model_path())")
WORK=$(mktemp -d)
PORT=${PORT:-18431}
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK/tasks"
cat > "$WORK/tasks/gsm8k_local.yaml" <<YAML
include: $(realpath .lmeval-venv/lib/python3*/site-packages/lm_eval/tasks/gsm8k/gsm8k.yaml)
task: gsm8k_local
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: $DATA
training_split: null
fewshot_split: null
test_split: test
num_fewshot: 0
generation_kwargs:
  until: ["Question:", "</s>", "<|im_end|>"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: 96
YAML

run_one() {  # NAME SERVER_ARGS...
  local name=$1; shift
  nice -n 10 .venv/bin/python -m llama_cpp.server --model "$GGUF" --port "$PORT" \
      --n_threads 1 --n_threads_batch 1 --n_ctx 2048 "$@" > "$WORK/server-$name.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null && break; sleep 1
  done
  HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 nice -n 10 .lmeval-venv/bin/lm_eval \
      --model local-completions \
      --model_args "model=smollm2-135m,base_url=http://127.0.0.1:$PORT/v1/completions,tokenizer_backend=None,tokenized_requests=False,num_concurrent=1,max_retries=1" \
      --include_path "$WORK/tasks" --tasks gsm8k_local --limit "$LIMIT" \
      --log_samples --output_path "$WORK/out-$name" --seed 0
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=
  rm -rf "${OUT:?}/$name"; mkdir -p "$OUT/$name"
  # lm-eval writes OUT/<model>/{results,samples_<task>}_<date>.json[l]; keep both
  find "$WORK/out-$name" -type f \( -name 'samples_*.jsonl' -o -name 'results_*.json' \) \
      -exec cp {} "$OUT/$name/" \;
}

run_one a
run_one b --flash_attn true --type_k 8 --type_v 8   # 8 = GGML_TYPE_Q8_0
ls -l "$OUT"/*
