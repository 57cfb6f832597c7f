#!/usr/bin/env bash
# Drive benchmarks/gpu_vllm.py on the lent GPU machine across device calls. From the project root
# there, after `. .device-v2/on-device-vllm.sh` (or /root/vllm-stage/on-device-vllm.sh when warm):
#   bash benchmarks/gpu_vllm_device.sh start DATA.jsonl [DEADLINE_S [WAIT_S [STEPS]]]   convert
#        SmolLM2, install abgate, start `gpu_vllm.py all` (STEPS: a,b,... of its steps) in its own
#        session, then wait until the call has run WAIT_S seconds in all (default 500)
#   bash benchmarks/gpu_vllm_device.sh wait [SECONDS]   wait for it (default 540 s), then pack
# Results: /root/gv (records, logs, figures-*.json); each call packs them into $OUT/gv.tar.gz.
set -uo pipefail
CALL_START=$(date +%s) root=${GV_ROOT:-/root/gv} name=gpu_vllm
. "$(dirname "$0")/gpu_device_common.sh"
case ${1:-} in
  start)
    data=${2:?data file}; deadline=${3:-1500}; steps=${5:+--steps $5}
    prepare "$data" || exit
    launch "python3 benchmarks/gpu_vllm.py all --model /root/m/smol --data $root/gsm8k-test.jsonl -o $root --deadline $deadline $steps"
    wait_for "${4:-500}" ;;
  wait) wait_for "${2:-540}" ;;
  *) echo "usage: $0 start DATA [DEADLINE_S [WAIT_S [STEPS]]] | wait [SECONDS]" >&2; exit 2 ;;
esac
