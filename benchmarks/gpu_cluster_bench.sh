#!/usr/bin/env bash
# Issue 33 item 7 on the lent H200: `abgate bench --cluster` and `abgate baseline check --cluster`
# with 2 vLLM replicas (in-process engines, SmolLM2 bf16) sharing the one GPU (num_gpus=0.5 each,
# gpu_memory_utilization 0.18, enforce_eager to keep the loads short), on a local Ray cluster.
# The baseline is recorded with `baseline record --cluster` (on one replica actor, the process kind
# the check runs in: Ray's OMP_NUM_THREADS, vLLM's VLLM_WORKER_MULTIPROC_METHOD=spawn in an actor and
# a worker's mapped libraries are then the same), then checked with nothing declared. Then GPU memory and the processes left are checked.
# From the project root there, vLLM, Ray and the SmolLM2 GGUF staged (../shared/gpu/README.md):
#   bash benchmarks/gpu_cluster_bench.sh DATA.jsonl start    (prepares, launches the driver, waits)
#   bash benchmarks/gpu_cluster_bench.sh DATA.jsonl wait     (a later call: waits for it, packs)
# Results: $OUT/cluster-bench/ (bench/cluster.json, check.json, logs, cleanup.txt) and a tarball.
set -uo pipefail
CALL_START=$(date +%s) root=${GC_ROOT:-/root/cluster-bench} name=gpu_cluster_bench
. "$(dirname "$0")/gpu_device_common.sh"
data=${1:?data file} step=${2:?start or wait}
if [[ $step == start ]]; then
  prepare "$data" || exit
  . "${RAY_STAGE:-/root/ray-stage}/on-device-ray.sh" || exit
  cat >"$root/driver.sh" <<EOF
SKIP_BENCH=${SKIP_BENCH:-}
EOF
  cat >>"$root/driver.sh" <<'EOF'
set -uo pipefail
cd "$1"; root=$2
E=(--engine vllm --model /root/m/smol --engine-arg dtype=bfloat16 --engine-arg max_model_len=2048
   --engine-arg gpu_memory_utilization=0.18 --engine-arg enforce_eager=true)
C=(--cluster local --cluster-opt replicas=2 --cluster-opt num_gpus=0.5 --cluster-opt num_cpus=2)
L=(--input-len 128,512 --output-len 64 --warmup 1 --repeats 3)
echo "GPU memory before: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) MiB"
if [[ -z ${SKIP_BENCH:-} ]]; then  # SKIP_BENCH=1: the baseline record and check alone
  t=$(date +%s); python3 -m abgate bench "${E[@]}" "${L[@]}" --peak-bw 4800 "${C[@]}" -o "$root/bench" --force
  echo "bench --cluster rc=$? in $(( $(date +%s) - t )) s"
fi
t=$(date +%s); python3 -m abgate baseline record "${E[@]}" "${L[@]}" --no-probes "${C[@]}" -o "$root/base" --force
echo "baseline record --cluster rc=$? in $(( $(date +%s) - t )) s"
t=$(date +%s); python3 -m abgate baseline check "$root/base" "${C[@]}" --json "$root/check.json"
echo "baseline check --cluster rc=$? in $(( $(date +%s) - t )) s"
sleep 5
{ echo "GPU memory after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) MiB"
  echo "ray/vLLM processes left: $(ps -eo pid,cmd | grep -E '[r]aylet|[g]cs_server|[r]ay::|[V]LLM::|[E]ngineCore' | wc -l)"
  ps -eo pid,cmd | grep -E '[r]aylet|[g]cs_server|[r]ay::|[V]LLM::|[E]ngineCore' | head -5; } | tee "$root/cleanup.txt"
EOF
  launch bash "$root/driver.sh" "$PWD" "$root"
fi
wait_for "${WAIT_S:-560}"
mkdir -p "$OUT/cluster-bench"
cp -f "$root/bench/cluster.json" "$root/check.json" "$root/cleanup.txt" "$root/driver.log" "$root/gpu.txt" \
  "$OUT/cluster-bench/" 2>/dev/null
true
