#!/usr/bin/env bash
# One device call on the lent H200 for the figures of 2026-12-02 (issue 37's runtime weights diff and
# issue 33's served load shape against `vllm bench serve`), from the project root there, after the
# vLLM and model parts are staged (../shared/gpu/README.md):
#   bash benchmarks/gpu_session_device.sh DATA.jsonl seeds|dummy|load|together|truth    (one call each: each may run 10 minutes)
# 1. seeds (or weights, its old name): benchmarks/gpu_seed_rows.sh, issue 37's three rows: vLLM fp8
#    (online) vs bf16 weights read from the running engine, the manifest matched against a real
#    EngineCore's mapped libraries, per-rank precision facts, the Llama-3-8B-shaped dummy's diff;
# 2. `vllm serve` of the bf16 SmolLM2, then benchmarks/served_load.py at concurrency 32 (a server
#    warm-up pass, then per repeat abgate's generator and `vllm bench serve` in alternating order,
#    3 repeats), the server stopped and the port and GPU memory checked.
# 3. together: benchmarks/load_client_cost.py (the clients' CPU per chunk on this host), then
#    benchmarks/served_load_together.py (both clients at once against one `vllm serve`; SEQUENTIAL=N
#    adds N repeats of served_load.py after it), everything tarred into $OUT/served-load.tgz;
# 4. truth: benchmarks/client_truth.py (both clients against the paced loopback server, no GPU);
#    TOGETHER=1: both at once (--together); TOKENIZER=DIR: vllm bench serve's tokenizer (default
#    /root/m/smol, converted from the staged GGUF; a tokenizer folder alone needs no model staged).
# Results under $OUT (seed-rows/, served-load/, served_load.json, cleanup.txt).
set -uo pipefail
data=${1:?data file} step=${2:?seeds or load}
if [[ $step == seeds || $step == weights ]]; then bash "$(dirname "$0")/gpu_seed_rows.sh" "$data"; exit; fi
if [[ $step == dummy ]]; then bash "$(dirname "$0")/gpu_seed_rows.sh" "$data" dummy; exit; fi
. "${VLLM_STAGE:-/root/vllm-stage}/on-device-vllm.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# load mode's sizes (environment): NUM_PROMPTS (320), REPEATS (3), WARMUPS (requests each client
# sends before its clock starts; default the concurrency), CONCURRENCY (32), LOAD_TIMEOUT (330 s)
np=${NUM_PROMPTS:-320} reps=${REPEATS:-3} conc=${CONCURRENCY:-32} lt=${LOAD_TIMEOUT:-330}
warm=${WARMUPS:-$conc} cprocs=${CLIENT_PROCS:-1}  # CLIENT_PROCS: abgate's client processes
tok=${TOKENIZER:-${MODEL_DIR:-/root/m/smol}}
[[ -d $tok ]] || vllm_convert_smol || exit
python3 -c "import abgate" 2>/dev/null || vllm_install_checkout || exit
sl=$OUT/served-load && mkdir -p "$sl"
# LOG_REQUESTS=1: the server logs each request's SamplingParams (what each client's requests
# asked of it); the served_load driver reads the server's /metrics around each side either way
if [[ $step == truth ]]; then  # both clients against the paced loopback server (no GPU, no vllm serve)
  together=(); [[ -n ${TOGETHER:-} ]] && together=(--together)
  OUT=$sl timeout "$lt" python3 benchmarks/client_truth.py --vllm vllm --tokenizer "$tok" \
    --itl-ms "${ITL_MS:-3}" --concurrency "$conc" --num-prompts "$np" --repeats "$reps" \
    --client-procs "${CLIENT_PROCS:-1,4}" --data "$data" --json "$OUT/client_truth.json" \
    "${together[@]}" >"$sl/driver.log" 2>&1
  echo "client_truth rc=$?"; tail -c 2500 "$sl/driver.log"
  tar czf "$OUT/client-truth.tgz" -C "$OUT" served-load; exit
fi
if [[ $step == together ]]; then  # the clients' CPU per streamed chunk on this host, first
  python3 benchmarks/load_client_cost.py --chunks 4000 --repeats 1 2>&1 | tee "$OUT/load_client_cost.txt"
fi
logreq=(); [[ -n ${LOG_REQUESTS:-} ]] && logreq=(--enable-log-requests)
# MODEL_DIR=DIR with DUMMY=1: SmolLM2's config and tokenizer alone, random weights of its shape
# (`--load-format dummy`: the same compute per token, nothing of the model to stage)
model=${MODEL_DIR:-/root/m/smol}; dummy=(); [[ -n ${DUMMY:-} ]] && dummy=(--load-format dummy)
setsid vllm serve "$model" "${dummy[@]}" --port 8011 --served-model-name smol --gpu-memory-utilization 0.5 \
  --max-model-len 2048 "${logreq[@]}" >"$sl/server.log" 2>&1 </dev/null &
spid=$!
for _ in $(seq 150); do curl -sf http://127.0.0.1:8011/v1/models >/dev/null && break; sleep 1; done
echo "server ready after $SECONDS s (pid $spid)"
if [[ $step == together ]]; then  # both clients at once, each at concurrency C (served_load_together.py)
  OUT=$sl timeout "$lt" python3 benchmarks/served_load_together.py --url http://127.0.0.1:8011 --vllm vllm \
    --model smol --tokenizer "$tok" --concurrency "$conc" --num-prompts "$np" --output-len 128 \
    --repeats "$reps" --warmups "$warm" --client-procs "${CLIENT_PROCS:-1,4}" --data "$data" \
    --json "$OUT/served_load_together.json" >"$sl/driver.log" 2>&1
  echo "together rc=$?"; tail -c 3000 "$sl/driver.log"
  if [[ -n ${SEQUENTIAL:-} ]]; then  # then the one-after-the-other comparison, with the server's /metrics
    OUT=$sl/sequential timeout 200 python3 benchmarks/served_load.py --url http://127.0.0.1:8011 --vllm vllm \
      --model smol --tokenizer "$tok" --concurrency "$conc" --num-prompts 320 --output-len 128 \
      --repeats "${SEQUENTIAL}" --warmups "$warm" --client-procs 1 --data "$data" --json "$OUT/served_load.json" \
      --server-metrics >"$sl/sequential.log" 2>&1
    echo "served_load rc=$?"; grep '^{"repeat"' "$sl/sequential.log" | cut -c1-600
  fi
  # every file in one archive (a call brings back a few files only)
  tar czf "$OUT/served-load.tgz" --exclude=server.log -C "$OUT" served-load && gzip -f "$sl/server.log"
else
OUT=$sl timeout "$lt" python3 benchmarks/served_load.py --url http://127.0.0.1:8011 --vllm vllm \
  --model smol --tokenizer "$tok" --concurrency "$conc" --num-prompts "$np" --output-len 128 \
  --repeats "$reps" --warmups "$warm" --client-procs "$cprocs" --data "$data" --json "$OUT/served_load.json" --server-metrics \
  >"$sl/driver.log" 2>&1
echo "served_load rc=$?"; tail -c 2500 "$sl/driver.log"
fi
if [[ -n ${LOG_REQUESTS:-} ]]; then  # one request of each client as the server parsed it
  { grep -m1 'Received request cmpl-bench' "$sl/server.log"; grep 'Received request' "$sl/server.log" \
      | grep -v 'cmpl-bench' | head -1; } | cut -c1-1500 | tee "$OUT/requests-as-parsed.txt"
  gzip -f "$sl/server.log"
fi
kill -TERM -- -"$spid" 2>/dev/null; for _ in $(seq 30); do kill -0 "$spid" 2>/dev/null || break; sleep 1; done
kill -KILL -- -"$spid" 2>/dev/null
{ echo "after stop:"; ps -eo pid,cmd | grep -c '[v]llm serve' ; python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 8011)); print('port 8011 free')" ;
  nvidia-smi --query-gpu=memory.used --format=csv,noheader; } | tee "$OUT/cleanup.txt"
ls -la "$OUT" "$sl"
