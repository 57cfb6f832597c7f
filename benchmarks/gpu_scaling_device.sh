#!/usr/bin/env bash
# Issue 33's scaling figure on the lent GPU machine's 16 CPU cores: benchmarks/cluster_scaling.py with
# 1, 2 and 4 llama.cpp replicas of 4 threads each on a local Ray cluster (the machine's CPU only; the
# GPU is not used). Needs vLLM's tree (pydantic and the like, abgate installed by vllm_install_checkout),
# Ray (../shared/gpu/stage-ray.sh) and benchmarks/gpu_stage_extra.sh's llama-cpp-python and GGUF:
#   bash benchmarks/gpu_scaling_device.sh ITEMS MAX_TOKENS [REPLICAS]
# Results: $OUT/scaling/ (cpu.txt, scaling.json, scaling.txt).
set -uo pipefail
# without vLLM's tree: pydantic and Ray's jsonschema from gpu_stage_extra.sh's wheels, abgate from src/
if [[ -d ${VLLM_SITE:-/tmp/site}/vllm ]]; then . "${VLLM_STAGE:-/root/vllm-stage}/on-device-vllm.sh" || exit 3; fi
. /root/ray-stage/on-device-ray.sh || exit 3
export PYTHONPATH=/tmp/site-lcpp:$PWD/src:$PYTHONPATH
res=$OUT/scaling && mkdir -p "$res"
{ lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node|L3'; uptime; } | tee "$res/cpu.txt"
timeout 560 python3 benchmarks/cluster_scaling.py --replicas "${3:-1,2,4}" --threads 4 --items "${1:?items}" \
  --max-tokens "${2:?max tokens}" --model /root/models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --data /root/stage/gsm8k-test.jsonl ${ALLOW:+--allow-host-differences $ALLOW} --json "$res/scaling.json" >"$res/scaling.txt" 2>"$res/scaling.err"
echo "rc=$?"; cat "$res/scaling.txt"; grep -v "^\s*$" "$res/scaling.err" | grep -E "^#|Error|error" | tail -12
echo "left: $(ps -eo cmd | grep -cE '[r]aylet|[g]cs_server|ray::')"
