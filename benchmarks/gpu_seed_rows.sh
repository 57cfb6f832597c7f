#!/usr/bin/env bash
# Issue 37's three GPU rows on the lent H200, one device call of at most 9 minutes, from the
# project root there (vLLM staged: ../shared/gpu/README.md):
#   bash benchmarks/gpu_session_device.sh DATA.jsonl seeds|dummy   (or: bash benchmarks/gpu_seed_rows.sh DATA.jsonl [dummy])
# 1. runtime weights diff, vLLM quantization="fp8" (online, at load) against bf16 on SmolLM2, read
#    from the running EngineCore's worker through collective_rpc (abgate weights-diff --engine vllm;
#    the fp8 reader fixed for square projections: engines/vllm/fp8_layout.py);
# 2. row 2 and row 3 in one `abgate bench` on a real vLLM EngineCore (one GPU: rank 0): a manifest
#    of vLLM's _C extension and libtorch_cuda re-hashed at run start and matched against what the
#    engine's processes mapped (provenance.manifest.processes), a contract requiring _C in the
#    EngineCore and stating [every_rank] facts (effective_config.ranks, per-rank precision facts);
#    the same with quantization=fp8 (quantization per module type on the rank);
# 3. with "dummy", in a call of its own (two 16 GB loads and 32 GB read through collective_rpc did not
#    fit in what was left of the first call): the Llama-3-8B-shaped dummy's weights diff.
# Both diff arms run enforce_eager=true: the weights do not depend on the graph mode and no
# CUDA graphs are captured (faster loads). Results: $OUT/seed-rows/ (JSON, printed tables, logs, each
# bench's run.json; the bench directories stay on the device: their many files once made the transfer
# leave everything out).
set -uo pipefail
CALL_START=$(date +%s) root=${GV_ROOT:-/root/seed-rows} name=gpu_seed_rows
. "$(dirname "$0")/gpu_device_common.sh"
prepare "${1:?data file}" || exit
mode=${2:-smol}
res=$OUT/seed-rows && mkdir -p "$res" && cp -f "$root/gpu.txt" "$res/" 2>/dev/null
# a callable reaches the worker only with insecure serialization on (vLLM v1); the frontend
# encodes the callable too, so abgate's own process needs it as well (seen on the H200)
export VLLM_ALLOW_INSECURE_SERIALIZATION=1
left() { echo $(( CALL_START + ${BUDGET_S:-540} - $(date +%s) )); }
eager=(--arm-a enforce_eager=true --arm-b enforce_eager=true)
common=(--engine vllm --env VLLM_ALLOW_INSECURE_SERIALIZATION=1 "${eager[@]}"
        --arm-a gpu_memory_utilization=0.5 --arm-b gpu_memory_utilization=0.5 --arm-b quantization=fp8)
run_diff() {  # NAME TIMEOUT MODEL [EXTRA ARGS...]
  local tag=$1 limit=$2 model=$3 t0; shift 3; t0=$(date +%s)
  timeout "$limit" python3 -m abgate weights-diff "${common[@]}" --model "$model" "$@" --top 10 \
    --json "$res/weights-diff-$tag.json" >"$res/weights-diff-$tag.txt" 2>"$res/weights-diff-$tag.err"
  echo "$tag: rc=$? in $(( $(date +%s) - t0 )) s (limit $limit s)"; tail -c 1200 "$res/weights-diff-$tag.err"
}
if [[ $mode == dummy ]]; then
  run_diff llama3-dummy $(( $(left) - 30 )) /root/m/llama3-8b-dummy --arm-a load_format=dummy --arm-b load_format=dummy
fi
[[ $mode == dummy ]] || run_diff smol 170 /root/m/smol

if [[ $mode != dummy ]]; then
# rows 2 and 3: the manifest's libraries (absolute paths) and a contract on a real EngineCore
vc=$(find /tmp/site -maxdepth 2 -path '*/vllm/_C*.so' | head -1)
[[ -n $vc ]] || echo "rows 2/3: vLLM's _C extension not found under /tmp/site" >&2
site=$(dirname "${vc:-/tmp/site/vllm/_C.abi3.so}")
torch_cuda=$(python3 -c "import os, torch; p = os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cuda.so'); print(p if os.path.exists(p) else '')")
mroot=$root/manifest-root && mkdir -p "$mroot" && echo "seed rows" >"$mroot/README"
python3 -m abgate manifest build --root "$mroot" --lib "$site/_C*.so" ${torch_cuda:+--lib "$torch_cuda"} \
  -o "$res/manifest.json" 2>&1 | tail -2
cat >"$res/contract.toml" <<EOF
engine = "vllm"
[libraries]
required = ["$site/_C*.so"]
roles = ["engine_core"]
[every_rank]
model_dtype = "bfloat16"
graph_mode = "eager"
EOF
bench_row() {  # TAG [ENGINE ARGS...]
  local tag=$1 t0; shift; t0=$(date +%s)
  timeout 120 python3 -m abgate bench --engine vllm --model /root/m/smol --input-len 64 --output-len 16 \
    --repeats 1 --warmup 0 --engine-arg gpu_memory_utilization=0.5 --engine-arg enforce_eager=true "$@" \
    --env VLLM_ALLOW_INSECURE_SERIALIZATION=1 --manifest "$res/manifest.json" --contract "$res/contract.toml" \
    -o "$root/$tag" >"$res/$tag.txt" 2>"$res/$tag.err"
  echo "$tag: rc=$? in $(( $(date +%s) - t0 )) s"; tail -c 800 "$res/$tag.err"
  cp -f "$root/$tag/run.json" "$res/$tag.run.json" 2>/dev/null
}
bench_row rows23-bf16
bench_row rows23-fp8 --engine-arg quantization=fp8
python3 - "$res" <<'PY'
import json, sys, pathlib
res = pathlib.Path(sys.argv[1])
for tag in ("rows23-bf16", "rows23-fp8"):
    f = res / f"{tag}.run.json"
    if not f.exists():
        print(tag, "no run.json"); continue
    d = json.loads(f.read_text()); prov = d.get("provenance") or {}
    man = prov.get("manifest") or {}
    print(tag, "manifest stale:", man.get("stale"), "freshness:", json.dumps(man.get("freshness"))[:400])
    for p in man.get("processes") or []:
        print("  pid", p["pid"], p["role"], p["rank"], "matched", p["matched"], "differed",
              [x["why"] for x in p["differed"]], "not mapped", p["not_mapped"], "unnamed", len(p["unnamed"]))
    c = prov.get("contract") or {}
    print("  contract passed:", c.get("passed"), [v.get("message") or v for v in c.get("violations", [])][:6])
    eff = ((d.get("engine") or {}).get("effective") or {})  # records v2: engine.effective
    for r in eff.get("ranks") or [eff.get("ranks_not_reported")]:
        print("  rank facts:", json.dumps(r)[:900])
PY

fi

python3 - "$res" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("weights-diff-*.json")):
    d = json.loads(f.read_text()); o = d["summary"]["overall"]
    print(f.name, d["summary"]["n_compared"], "compared; pooled rel L2", o.get("pooled_rel_l2"),
          "max", o.get("max_rel_l2"), "; dtypes", d["ref"]["dtypes_loaded"], "->", d["other"]["dtypes_loaded"])
    print("  warnings:", d["warnings"])
PY
ls -la "$res"
