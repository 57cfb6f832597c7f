#!/usr/bin/env bash
# Issue 37's GPU rows on the lent H200 (one device call, < 10 min), from the project root there:
#   bash benchmarks/gpu_seed_rows.sh DATA.jsonl
# 1. the runtime weights diff: vLLM quantization="fp8" (online, at load) against bf16, read from the
#    running EngineCore's worker through collective_rpc (abgate weights-diff --engine vllm), on the
#    SmolLM2 weights and on the Llama-3-8B-shaped dummy (load_format=dummy);
# JSON: $OUT/seed-rows/weights-diff-{smol,llama3-dummy}.json, the printed tables in *.txt.
# Commit them under benchmarks/results/gpu/vllm/ and show them in docs/gpu.md.
set -uo pipefail
CALL_START=$(date +%s) root=${GV_ROOT:-/root/seed-rows} name=gpu_seed_rows
. "$(dirname "$0")/gpu_device_common.sh"
prepare "${1:?data file}" || exit
res=$OUT/seed-rows && mkdir -p "$res" && cp -f "$root/gpu.txt" "$res/" 2>/dev/null
# a callable reaches the worker only with insecure serialization on (vLLM v1); given per run
export VLLM_ALLOW_INSECURE_SERIALIZATION=1  # the frontend encodes the callable too, not only the engine process (seen on the H200)
common=(--engine vllm --env VLLM_ALLOW_INSECURE_SERIALIZATION=1
        --arm-a gpu_memory_utilization=0.5 --arm-b gpu_memory_utilization=0.5 --arm-b quantization=fp8)
run_diff() {  # NAME MODEL [EXTRA ARGS...]
  local tag=$1 model=$2; shift 2
  timeout 280 python3 -m abgate weights-diff "${common[@]}" --model "$model" "$@" --top 10 \
    --json "$res/weights-diff-$tag.json" >"$res/weights-diff-$tag.txt" 2>"$res/weights-diff-$tag.err"
  echo "$tag: rc=$?"; tail -c 1500 "$res/weights-diff-$tag.err"
}
run_diff smol /root/m/smol
run_diff llama3-dummy /root/m/llama3-8b-dummy --arm-a load_format=dummy --arm-b load_format=dummy
python3 - "$res" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("weights-diff-*.json")):
    d = json.loads(f.read_text()); o = d["summary"]["overall"]
    print(f.name, d["summary"]["n_compared"], "compared; pooled rel L2", o.get("pooled_rel_l2"),
          "max", o.get("max_rel_l2"), "; dtypes", d["ref"]["dtypes_loaded"], "->", d["other"]["dtypes_loaded"])
PY
ls -la "$res"
