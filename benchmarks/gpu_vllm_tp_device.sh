#!/usr/bin/env bash
# Drive benchmarks/gpu_vllm_tp.py on a lent TWO-GPU machine (nvidia-h200-x2) across device calls
# (each call may run 10 minutes). NOT RUN YET: that kind was not lent when this was written.
# From the project root there, after the staging calls of ../shared/gpu/README.md:
#   bash benchmarks/gpu_vllm_tp_device.sh start DATA.jsonl [DEADLINE_S [WAIT_S]]
#        convert SmolLM2, write the Llama-3-8B-shaped config, install abgate, check the GPUs,
#        start `gpu_vllm_tp.py all` in its own session, then wait
#   bash benchmarks/gpu_vllm_tp_device.sh wait [SECONDS]   wait for it (default 540 s), then pack
# Results: /root/gvtp (records, logs, figures-*.json); each call packs them into $OUT/gvtp.tar.gz.
set -uo pipefail
root=/root/gvtp
. /root/vllm-stage/on-device-vllm.sh || { echo "gpu_vllm_tp: vLLM is not staged here" >&2; exit 3; }
# NVLink multicast stays off (abgate sets these in every engine process too; this covers
# everything else the script starts)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
pack() {
  tar -czf "$OUT/gvtp.tar.gz" -C /root gvtp 2>/dev/null
  cp -f "$root/progress.json" "$OUT/" 2>/dev/null
  tail -c 6000 "$root/driver.log" 2>/dev/null
  echo; ls -la "$OUT"; cat "$root/progress.json" 2>/dev/null
}
wait_for() {
  local until=$(( $(date +%s) + ${1:-540} ))
  while [[ -f $root/running ]] && (( $(date +%s) < until )); do sleep 5; done
  [[ -f $root/running ]] && echo "gpu_vllm_tp: still running" || echo "gpu_vllm_tp: finished"
  pack
}
case ${1:-} in
  start)
    data=${2:?data file}; deadline=${3:-2400}
    n=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
    (( n >= 2 )) || { echo "gpu_vllm_tp: needs 2 GPUs, nvidia-smi lists $n" >&2; exit 3; }
    vllm_convert_smol || exit
    vllm_dummy_llama3 || exit
    vllm_install_checkout || exit
    mkdir -p "$root" && cp -f "$data" "$root/gsm8k-test.jsonl" || exit
    nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,memory.used --format=csv >"$root/gpu.txt"
    nvidia-smi topo -m >>"$root/gpu.txt" 2>&1
    touch "$root/running"
    setsid bash -c "python3 benchmarks/gpu_vllm_tp.py all --data $root/gsm8k-test.jsonl -o $root --deadline $deadline >$root/driver.log 2>&1; rm -f $root/running" </dev/null >/dev/null 2>&1 &
    sleep 2
    wait_for "${4:-500}" ;;
  wait) wait_for "${2:-540}" ;;
  *) echo "usage: $0 start DATA [DEADLINE_S [WAIT_S]] | wait [SECONDS]" >&2; exit 2 ;;
esac
