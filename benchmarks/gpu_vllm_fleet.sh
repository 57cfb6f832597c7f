#!/usr/bin/env bash
# Issue 33 on the lent H200: the fp8-vs-bf16 vLLM A/B (in-process engines, SmolLM2 in bf16) on a
# local Ray cluster, first with 1 replica, then with 2 replicas sharing the one GPU (a placement-group
# bundle of 0.5 GPU each, both arms resident in each replica: 4 vLLM engines at 2 replicas). Then:
# the throughput ratio (items / dispatch wall time), the two verdicts, the token IDs of every
# (item, seed, arm) compared between the runs, and cleanup (no Ray or vLLM process left, GPU memory
# back). From the project root there, vLLM and Ray staged (../shared/gpu/README.md), the SmolLM2
# GGUF in /root/models:
#   bash benchmarks/gpu_vllm_fleet.sh DATA.jsonl ITEMS MAX_TOKENS R   (R: 1 or 2; one call each)
#   bash benchmarks/gpu_vllm_fleet.sh DATA.jsonl ITEMS MAX_TOKENS compare
# Results: $OUT/vllm-fleet/ (each run's ab.json, report.md, the driver's output, compare.txt).
set -uo pipefail
CALL_START=$(date +%s) root=${GV_ROOT:-/root/vllm-fleet} name=gpu_vllm_fleet
. "$(dirname "$0")/gpu_device_common.sh"
data=${1:?data file} items=${2:?items} max_tokens=${3:?max tokens} step=${4:?1, 2 or compare}
res=$OUT/vllm-fleet && mkdir -p "$res" "$root"
if [[ $step != compare ]]; then
  prepare "$data" || exit
  . "${RAY_STAGE:-/root/ray-stage}/on-device-ray.sh" || exit
  cat >"$root/exp-r$step.toml" <<EOF
name = "vllm-fp8-fleet-r$step"
baseline = "bf16"
[shared]
engine = "vllm"
model = "/root/m/smol"
suite = "gsm8k"
data = "$root/gsm8k-test.jsonl"
limit = $items
max_tokens = $max_tokens
seeds = [0]
temperature = 0.0
engine_args = { dtype = "bfloat16", max_model_len = 2048, gpu_memory_utilization = 0.18 }
[schedule]
mode = "interleave"
warmup = 1
[evidence]
agreement = false
probes = false
[cluster]
replicas = $step
num_gpus = 0.5
num_cpus = 2
placement = "pack"
[arms.bf16]
[arms.fp8]
engine_args = { quantization = "fp8" }
EOF
  before=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
  t0=$(date +%s)
  timeout $(( CALL_START + ${BUDGET_S:-570} - t0 )) python3 -m abgate ab "$root/exp-r$step.toml" --cluster local \
    -o "$root/r$step" --force >"$res/r$step.out" 2>"$res/r$step.err"
  echo "r$step: rc=$? in $(( $(date +%s) - t0 )) s"; tail -c 2500 "$res/r$step.err"; tail -c 1500 "$res/r$step.out"
  cp -f "$root/r$step/ab.json" "$res/r$step.ab.json"; cp -f "$root/r$step/report.md" "$res/r$step.report.md"
  cp -f "$root/r$step/comparison.json" "$res/r$step.comparison.json"
  sleep 5
  { echo "GPU memory used before: $before MiB; after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) MiB"
    echo "ray/vLLM processes left: $(ps -eo pid,cmd | grep -E '[r]aylet|[g]cs_server|ray::|[V]LLM::|[E]ngineCore' | wc -l)"
    ps -eo pid,cmd | grep -E '[r]aylet|[g]cs_server|ray::|[V]LLM::|[E]ngineCore' | head -5; } | tee "$res/r$step.cleanup.txt"
  exit 0
fi
python3 - "$root" "$res" <<'PY'
import json, sys, pathlib
root, res = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
lines = []
def samples(run, arm):
    out = {}
    for line in (root / run / "arms" / arm / "samples.jsonl").read_text().splitlines():
        s = json.loads(line)
        if not s.get("warmup"):
            out[s["key"]] = (s.get("output") or {}).get("token_ids")
    return out
fleet = {}
for run in ("r1", "r2"):
    ab = json.loads((root / run / "ab.json").read_text())
    f = ab.get("fleet") or {}
    n = sum(len(v) for v in (f.get("items_by_replica") or {}).values())
    fleet[run] = n / float(f["dispatch_wall_s"])
    comp = json.loads((root / run / "comparison.json").read_text())["comparisons"]
    verdicts = {arm: [c["verdict"]["decision"], c["verdict"]["reasons"][:3],
                      {g.get("name"): g.get("outcome") for g in c["verdict"]["gates"]}]
                for arm, c in comp.items()}
    lines.append(f"{run}: {n} items over {len(f.get('replicas') or [])} replica(s) in "
                 f"{f['dispatch_wall_s']:.1f} s dispatch wall = {fleet[run]:.3f} items/s; "
                 f"by replica {({k: len(v) for k, v in (f.get('items_by_replica') or {}).items()})}; "
                 f"lost {f.get('lost')}")
    lines.append(f"  verdicts: {json.dumps(verdicts)[:900]}")
lines.append(f"throughput ratio r2/r1: {fleet['r2'] / fleet['r1']:.3f}")
for arm in ("bf16", "fp8"):
    a, b = samples("r1", arm), samples("r2", arm)
    same = sum(1 for k in a if k in b and a[k] == b[k] and a[k] is not None)
    lines.append(f"{arm}: token IDs identical for {same} of {len(a)} (r1) / {len(b)} (r2) samples")
text = "\n".join(lines)
print(text)
(res / "compare.txt").write_text(text + "\n")
PY
