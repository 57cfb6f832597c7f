#!/usr/bin/env bash
# Drive benchmarks/gpu_vllm_tp.py on a lent TWO-GPU machine (nvidia-h200-x2) across device calls
# (each call may run 10 minutes). NOT RUN YET: that kind was not lent when this was written.
# From the project root there, after the staging calls of ../shared/gpu/README.md:
#   bash benchmarks/gpu_vllm_tp_device.sh start DATA.jsonl [DEADLINE_S [WAIT_S]]
#        check the GPUs, convert SmolLM2, write the Llama-3-8B-shaped config, install abgate,
#        start `gpu_vllm_tp.py all` in its own session, then wait until the call has run WAIT_S
#        seconds in all (default 500)
#   bash benchmarks/gpu_vllm_tp_device.sh wait [SECONDS]   wait for it (default 540 s), then pack
# Results: /root/gvtp (records, logs, figures-*.json); each call packs them into $OUT/gvtp.tar.gz.
set -uo pipefail
CALL_START=$(date +%s) root=${GV_ROOT:-/root/gvtp} name=gpu_vllm_tp
. "$(dirname "$0")/gpu_device_common.sh"
case ${1:-} in
  start)
    data=${2:?data file}; deadline=${3:-2400}
    n=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
    (( n >= 2 )) || { echo "$name: needs 2 GPUs, nvidia-smi lists $n" >&2; exit 3; }
    prepare "$data" || exit
    nvidia-smi topo -m >>"$root/gpu.txt" 2>&1
    launch "python3 benchmarks/gpu_vllm_tp.py all --data $root/gsm8k-test.jsonl -o $root --deadline $deadline"
    wait_for "${4:-500}" ;;
  wait) wait_for "${2:-540}" ;;
  *) echo "usage: $0 start DATA [DEADLINE_S [WAIT_S]] | wait [SECONDS]" >&2; exit 2 ;;
esac
