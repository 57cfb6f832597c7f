# Sourced by benchmarks/gpu_vllm_device.sh and gpu_vllm_tp_device.sh: what both do on a lent
# GPU machine across device calls (each call may run 10 minutes; the steps together run longer).
# The caller sets `root` (its results folder under /root) and `name` (its log prefix) first.
# Needs vLLM staged (../shared/gpu/README.md); sourcing on-device-vllm.sh again is idempotent.
. "${VLLM_STAGE:-/root/vllm-stage}/on-device-vllm.sh" || { echo "$name: vLLM is not staged here" >&2; exit 3; }
# NVLink multicast stays off (abgate sets these in every engine process too; this covers
# everything else the scripts start)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

pack() {  # the results so far into $OUT, and where the driver is
  tar -czf "$OUT/$(basename "$root").tar.gz" -C "$(dirname "$root")" "$(basename "$root")" 2>/dev/null
  cp -f "$root/progress.json" "$OUT/" 2>/dev/null
  tail -c 6000 "$root/driver.log" 2>/dev/null
  echo; ls -la "$OUT"; cat "$root/progress.json" 2>/dev/null
}

wait_for() {  # until the driver ends or this call has run $1 s in all (its own start counted)
  local until=$(( ${CALL_START:-$(date +%s)} + ${1:-540} ))
  while [[ -f $root/running ]] && (( $(date +%s) < until )); do sleep 5; done
  [[ -f $root/running ]] && echo "$name: still running" || echo "$name: finished"
  pack
}

prepare() {  # DATA: convert SmolLM2, write the Llama-3-8B-shaped config, install abgate
  vllm_convert_smol || return
  vllm_dummy_llama3 || return
  vllm_install_checkout || return
  mkdir -p "$root" && cp -f "$1" "$root/gsm8k-test.jsonl" || return
  nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,memory.used --format=csv >"$root/gpu.txt"
  python3 -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" >>"$root/gpu.txt" 2>&1
  return 0  # gpu.txt is evidence, not a precondition
}

launch() {  # COMMAND...: the driver in its own session, so that a call's end does not stop it
  touch "$root/running"
  setsid bash -c "$* >$root/driver.log 2>&1; rm -f $root/running" </dev/null >/dev/null 2>&1 &
  sleep 2
}
