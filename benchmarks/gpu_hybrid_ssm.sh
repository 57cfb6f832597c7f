#!/usr/bin/env bash
# Issue 37, row 3 on a hybrid SSM model: per-rank state dtypes read from a real vLLM EngineCore
# and an `[every_rank] ssm_state_dtype = "float32"` contract clause, on the lent H200 (one GPU:
# rank 0), from the project root there after the vLLM and model parts are staged
# (../shared/gpu/README.md):
#   bash benchmarks/gpu_hybrid_ssm.sh DATA.jsonl
# The model is a NemotronH-shaped hybrid (vLLM's own NemotronHConfig: Mamba-2 mixers, attention
# and MLP layers, pattern "M-M*-M-M*-", hidden 1024) with random weights (load_format=dummy) and
# SmolLM2's tokenizer: state dtypes and the contract do not depend on the weights. Three benches:
#   fp32   mamba_ssm_cache_dtype=float32, contract holds (every rank's SSM state float32);
#   auto   the default (the model's bf16), the same contract fails naming rank 0 and the dtype;
#   graph  fp32 again with CUDA graphs (not eager): graph mode per rank in the record;
#   bf16   (alone, as `gpu_hybrid_ssm.sh DATA bf16`) mamba_ssm_cache_dtype=bfloat16: the clause fails.
# Seen on the H200: NemotronH's "auto" is float32 already (vLLM's own config for this architecture
# sets it), so the failing contrast needs bfloat16 asked for explicitly.
# Results: $OUT/hybrid-ssm/ (each bench's run.json, stdout/stderr, the rank facts printed).
set -uo pipefail
CALL_START=$(date +%s) root=${GV_ROOT:-/root/hybrid-ssm} name=gpu_hybrid_ssm
. "$(dirname "$0")/gpu_device_common.sh"
prepare "${1:?data file}" || exit
export VLLM_ALLOW_INSECURE_SERIALIZATION=1  # collective_rpc of a callable (vLLM v1)
res=$OUT/hybrid-ssm && mkdir -p "$res" && cp -f "$root/gpu.txt" "$res/" 2>/dev/null
model=/root/m/nemotron-h-dummy && mkdir -p "$model"
cp -f /root/m/smol/tokenizer* /root/m/smol/special_tokens_map.json "$model/" 2>/dev/null
cat >"$model/config.json" <<'JSON'
{
 "architectures": ["NemotronHForCausalLM"],
 "model_type": "nemotron_h",
 "vocab_size": 49152, "tie_word_embeddings": false,
 "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 10,
 "hybrid_override_pattern": "M-M*-M-M*-",
 "num_attention_heads": 16, "head_dim": 64, "num_key_value_heads": 4,
 "mlp_hidden_act": "relu2", "layer_norm_epsilon": 1e-5,
 "ssm_state_size": 64, "mamba_num_heads": 32, "mamba_n_groups": 2, "mamba_head_dim": 64,
 "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
 "max_position_embeddings": 4096, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
 "torch_dtype": "bfloat16"
}
JSON
cat >"$res/contract.toml" <<'EOF'
engine = "vllm"
[every_rank]
model_dtype = "bfloat16"
ssm_state_dtype = "float32"
EOF
bench() {  # TAG LIMIT [ENGINE ARGS...]
  local tag=$1 limit=$2 t0; shift 2; t0=$(date +%s)
  timeout "$limit" python3 -m abgate bench --engine vllm --model "$model" --input-len 64 \
    --output-len 16 --repeats 1 --warmup 0 --engine-arg load_format=dummy \
    --engine-arg gpu_memory_utilization=0.4 --engine-arg max_model_len=2048 "$@" \
    --env VLLM_ALLOW_INSECURE_SERIALIZATION=1 --contract "$res/contract.toml" \
    -o "$root/$tag" >"$res/$tag.txt" 2>"$res/$tag.err"
  echo "$tag: rc=$? in $(( $(date +%s) - t0 )) s"; tail -c 1500 "$res/$tag.err"
  cp -f "$root/$tag/run.json" "$res/$tag.run.json" 2>/dev/null
}
if [[ ${2:-} == bf16 ]]; then
  bench bf16 150 --engine-arg enforce_eager=true --engine-arg mamba_ssm_cache_dtype=bfloat16
else
  bench fp32 200 --engine-arg enforce_eager=true --engine-arg mamba_ssm_cache_dtype=float32
  bench auto 150 --engine-arg enforce_eager=true
  left=$(( CALL_START + ${BUDGET_S:-560} - $(date +%s) ))
  if (( left > 150 )); then bench graph $(( left - 20 )) --engine-arg mamba_ssm_cache_dtype=float32
  else echo "graph: skipped ($left s left)"; fi
fi
python3 - "$res" <<'PY'
import json, sys, pathlib
res = pathlib.Path(sys.argv[1])
for tag in ("fp32", "auto", "graph", "bf16"):
    f = res / f"{tag}.run.json"
    if not f.exists():
        continue
    d = json.loads(f.read_text())
    c = (d.get("provenance") or {}).get("contract") or {}
    print(tag, "contract passed:", c.get("passed"),
          [v.get("message") or v for v in c.get("violations", [])][:4])
    eff = (d.get("engine") or {}).get("effective") or {}
    for r in eff.get("ranks") or [eff.get("ranks_not_reported")]:
        layers = (r or {}).pop("state_dtypes_by_layer", {}) if isinstance(r, dict) else {}
        print("  rank facts:", json.dumps(r)[:700])
        print("  layers:", len(layers), json.dumps(dict(list(layers.items())[:4])))
PY
nvidia-smi --query-gpu=memory.used --format=csv,noheader | tee "$res/gpu-after.txt"
ls -la "$res"
