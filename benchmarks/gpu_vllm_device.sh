#!/usr/bin/env bash
# Drive benchmarks/gpu_vllm.py on the lent GPU machine across device calls (each call may run
# 10 minutes; the steps together run longer). From the project root there, after
# `. .device-v2/on-device-vllm.sh` (or /root/vllm-stage/on-device-vllm.sh on a warm machine):
#   bash benchmarks/gpu_vllm_device.sh start DATA.jsonl [DEADLINE_S [WAIT_S [STEPS]]]   convert
#        SmolLM2, install abgate, start `gpu_vllm.py all` (STEPS: a,b,... of its steps) in its own
#        session, then wait WAIT_S seconds (default 500)
#   bash benchmarks/gpu_vllm_device.sh wait [SECONDS]   wait for it (default 540 s), then pack
# Results: /root/gv (records, logs, figures-*.json); each call packs them into $OUT/gv.tar.gz.
set -uo pipefail
root=/root/gv
# the staging script's functions and environment (sourcing it again is idempotent)
. /root/vllm-stage/on-device-vllm.sh || { echo "gpu_vllm: vLLM is not staged here" >&2; exit 3; }
pack() {
  tar -czf "$OUT/gv.tar.gz" -C /root gv 2>/dev/null
  cp -f "$root/progress.json" "$OUT/" 2>/dev/null
  tail -c 6000 "$root/driver.log" 2>/dev/null
  echo; ls -la "$OUT"; cat "$root/progress.json" 2>/dev/null
}
wait_for() {
  local until=$(( $(date +%s) + ${1:-540} ))
  while [[ -f $root/running ]] && (( $(date +%s) < until )); do sleep 5; done
  [[ -f $root/running ]] && echo "gpu_vllm: still running" || echo "gpu_vllm: finished"
  pack
}
case ${1:-} in
  start)
    data=${2:?data file}; deadline=${3:-1500}; steps=${5:+--steps $5}
    vllm_convert_smol || exit
    vllm_dummy_llama3 || exit
    vllm_install_checkout || exit
    mkdir -p "$root" && cp -f "$data" "$root/gsm8k-test.jsonl" || exit
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv >"$root/gpu.txt"
    python3 -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" >>"$root/gpu.txt" 2>&1
    touch "$root/running"
    setsid bash -c "python3 benchmarks/gpu_vllm.py all --model /root/m/smol --data $root/gsm8k-test.jsonl -o $root --deadline $deadline $steps >$root/driver.log 2>&1; rm -f $root/running" </dev/null >/dev/null 2>&1 &
    sleep 2
    wait_for "${4:-500}" ;;
  wait) wait_for "${2:-540}" ;;
  *) echo "usage: $0 start DATA [DEADLINE_S [WAIT_S [STEPS]]] | wait [SECONDS]" >&2; exit 2 ;;
esac
