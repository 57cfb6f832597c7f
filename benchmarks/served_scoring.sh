#!/usr/bin/env bash
# Served distribution agreement on llama.cpp's llama-server: three launched arms (f16 KV,
# q8_0 KV + flash attention, a wrong RoPE base) on N zero-shot GSM8K items; prints each
# candidate's top-20 KL bound and top-1 agreement, and each arm's scoring cost against its
# generation time (docs/statistics.md, "Cost of the scoring pass", "Served arms").
#
#   bash benchmarks/served_scoring.sh [ITEMS=16] [MAX_TOKENS=32] [OUT=runs/served-scoring]
#
# Needs the built llama-server (tests/tools/build_llama_server.sh) and the GSM8K test set.
set -euo pipefail
ITEMS="${1:-16}" MAX_TOKENS="${2:-32}" OUT="${3:-runs/served-scoring}"
BIN="$(tests/tools/build_llama_server.sh)"
DATA="${ABGATE_GSM8K:-../shared/data/gsm8k/test.jsonl}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
printf '[speed]\nmax_slowdown = 0.9\n' > "$WORK/policy.toml"
cat > "$WORK/exp.toml" <<TOML
name = "served-scoring"
baseline = "base"
policy = "$WORK/policy.toml"
[shared]
engine = "openai"
suite = "gsm8k"
data = "$DATA"
limit = $ITEMS
max_tokens = $MAX_TOKENS
engine_args = { ctx-size = 1024, threads = 1, threads-batch = 1, parallel = 1, no-webui = true }
engine_options = { launch = "$BIN -m {model} --host {host} --port {port}", ready_timeout = 120.0 }
[schedule]
mode = "interleave"
warmup = 0
[evidence]
probes = false
[arms.base]
[arms.q8]
engine_args = { flash-attn = "on", cache-type-k = "q8_0", cache-type-v = "q8_0" }
[arms.rope]
engine_args = { rope-freq-base = 1.0 }
TOML
rm -rf "$OUT"
abgate ab "$WORK/exp.toml" -o "$OUT" > /dev/null || true  # INCONCLUSIVE/REJECT exit non-zero
python - "$OUT" <<'PY'
import json, sys
comps = json.load(open(f"{sys.argv[1]}/comparison.json"))["comparisons"]
for arm, c in comps.items():
    ag = c["comparison"]["agreement"]
    kld, top1 = ag["mean_kld"], ag["top1_agreement"]
    print(f"{arm}: {c['verdict']['decision']}; mean KLD bound {kld['estimate']:.4g} "
          f"({kld['ci'][0]:.3g}-{kld['ci'][1]:.3g}), top-1 {top1['estimate']:.3f}, "
          f"method {ag['method']} k={ag['k']}, {ag['n_tokens']} tokens")
cost = next(iter(comps.values()))["comparison"]["agreement"]["cost"]
for arm in comps:
    cost |= {arm: comps[arm]["comparison"]["agreement"]["cost"][arm]}
for arm, c in cost.items():
    print(f"{arm}: scoring {c['scoring_seconds']:.1f} s, generation {c['generation_seconds']:.1f} s,"
          f" ratio {c['scoring_over_generation']:.2f}x")
PY
