"""abgate's own figures on a GPU through the transformers engine (docs/gpu.md).

Three steps, each one command on a CUDA machine with abgate, torch, transformers,
accelerate and gguf installed (no network needed):

  python benchmarks/gpu_transformers.py env -o OUT
      versions, the device, and a measured device-to-device copy bandwidth
  python benchmarks/gpu_transformers.py bench --tokenizer TOKDIR -o OUT
      ``abgate bench`` of a Llama-3-8B-shaped model with random weights
      (load_format=dummy, bf16): dynamic against static KV cache, declared peak
      bandwidth 4800 GB/s (the H200's datasheet figure) for the roofline
  python benchmarks/gpu_transformers.py ab --model SmolLM2.gguf --data test.jsonl -o OUT
      ``abgate ab`` on GSM8K (--limit items, zero-shot, greedy): SmolLM2-135M-Instruct
      dequantized to bf16, dynamic against static KV cache
  python benchmarks/gpu_transformers.py ab-figures --ab-dir OUT/ab -o OUT
      the figures of an A/B directory again (e.g. after ``abgate ab --resume``)

Each step writes its records under OUT and a ``figures-<step>.json`` with the numbers
docs/gpu.md quotes; ``abgate report OUT/ab`` re-renders the A/B report from the records.
The Llama-3-8B shape is Meta's published config (32 layers, hidden 4096, 32 heads, 8 KV
heads, MLP 14336, vocabulary 128256, RoPE theta 500000); its tokenizer here is any
tokenizer directory (TOKDIR), e.g. SmolLM2's (its IDs all fall inside the vocabulary):
random weights make the tokens meaningless anyway, only the shapes matter for speed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
    "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1,
    "eos_token_id": 2, "initializer_range": 0.02, "attention_bias": False,
    "mlp_bias": False, "dtype": "bfloat16",
}
H200_PEAK_GBPS = 4800.0


def abgate(*args: str, log: Path) -> int:
    """Run the abgate CLI, its output teed to ``log``."""
    cmd = [sys.executable, "-m", "abgate", *args]
    print("$ abgate " + " ".join(args), flush=True)
    with log.open("a") as f:
        f.write("$ abgate " + " ".join(args) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        f.write(p.stdout)
    print(p.stdout[-4000:], flush=True)
    return p.returncode


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def env(out: Path) -> dict[str, Any]:
    import torch
    import transformers

    dev = torch.cuda.get_device_properties(0)
    n = 1 << 30  # 1 GiB of bf16 per buffer; read + write counted
    a = torch.empty(n // 2, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    copy_gbps = 2 * n * reps / (start.elapsed_time(end) / 1000) / 1e9
    del a, b
    torch.cuda.empty_cache()
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout
    return {"device": dev.name, "capability": f"{dev.major}.{dev.minor}",
            "sm_count": dev.multi_processor_count, "memory_bytes": dev.total_memory,
            "nvidia_smi": smi.strip(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "d2d_copy_gbps_read_plus_write": round(copy_gbps, 1),
            "declared_peak_gbps": H200_PEAK_GBPS}


def shape_dir(root: Path, tokenizer: Path) -> Path:
    """A config-only Llama-3-8B-shaped model directory (load_format=dummy)."""
    root.mkdir(parents=True, exist_ok=True)
    for f in tokenizer.iterdir():
        if f.is_file():
            shutil.copy(f, root / f.name)
    (root / "config.json").write_text(json.dumps(LLAMA3_8B, indent=1))
    return root


def _case(summary: dict[str, Any]) -> dict[str, Any]:
    c = summary["cases"][0]
    speed, fid, roof = c["speed"], c["fidelity"], c.get("roofline") or {}
    return {
        "steady_decode_tps_median": speed["steady_decode_tps"]["median"],
        "ttft_s_median": speed["ttft_s"]["median"],
        "prefill_tps_median": speed["prefill_tps"]["median"],
        "engine_decode_tps_median": fid["engine_decode_tps"]["median"],
        "decode_ratio_median": fid["decode_ratio"]["median"],
        "prefill_ratio_median": fid["prefill_ratio"]["median"],
        "overhead_us_per_token_median": fid["overhead_us_per_token"]["median"],
        "counts_match": c["counts_match"], "outputs_identical": c["outputs_identical"],
        "achieved_gbps_weights": roof.get("achieved_gbps_weights"),
        "fraction_of_peak_weights": roof.get("fraction_of_peak_weights"),
        "achieved_gbps": roof.get("achieved_gbps"),
        "fraction_of_peak": roof.get("fraction_of_peak"),
        "weights_bytes_per_token": roof.get("weights_bytes_per_token"),
    }


def bench(out: Path, tokenizer: Path, input_len: int, output_len: int, repeats: int) -> dict[
        str, Any]:
    model = shape_dir(out / "llama3-8b-shape", tokenizer)
    log = out / "bench.log"
    figures: dict[str, Any] = {"model": "Llama-3-8B shape, random weights (load_format=dummy)",
                               "input_len": input_len, "output_len": output_len,
                               "repeats": repeats}
    for arm, extra in (("dynamic", []), ("static", ["--engine-arg", "cache_implementation=static",
                                                    "--engine-arg",
                                                    f"max_cache_len={input_len + output_len}"])):
        t0 = time.time()
        rc = abgate("bench", "--engine", "transformers", "--model", str(model),
                    "--engine-arg", "load_format=dummy", "--engine-arg", "dtype=bfloat16",
                    "--engine-arg", "device=cuda", *extra, "--input-len", str(input_len),
                    "--output-len", str(output_len), "--repeats", str(repeats),
                    "--warmup", "1", "--peak-bw", str(H200_PEAK_GBPS),
                    "-o", str(out / f"bench-{arm}"), "--force", log=log)
        run = read(out / f"bench-{arm}" / "run.json")
        summary = read(out / f"bench-{arm}" / "summary.json")
        eff = run["engine"]["effective_config"]
        figures[arm] = {"rc": rc, "wall_s": round(time.time() - t0, 1), **_case(summary),
                        "compile": eff.get("compile"), "weights": eff.get("weights"),
                        "weight_bytes": eff.get("weight_bytes"),
                        "parameter_count": eff.get("parameter_count"),
                        "load_seconds": eff.get("load_seconds"),
                        "cleanup": run.get("cleanup")}
    d, s = figures["dynamic"]["steady_decode_tps_median"], figures["static"][
        "steady_decode_tps_median"]
    figures["static_over_dynamic_decode"] = s / d if d and s else None
    return figures


def experiment(model: str, data: str, limit: int, max_tokens: int) -> str:
    return f"""# SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to bf16 by transformers) on an H200:
# the default dynamic KV cache against a static cache (compiled decode step).
name = "gpu-smollm2-static-cache"
description = "transformers on CUDA: is a static KV cache faster, with the same answers?"
baseline = "dynamic"

[shared]
engine = "transformers"
model = "{model}"
suite = "gsm8k"
data = "{data}"
limit = {limit}
seeds = [0]
max_tokens = {max_tokens}
temperature = 0.0
engine_args = {{ dtype = "bfloat16", device = "cuda" }}

[schedule]
mode = "interleave"
warmup = 2

[evidence]
agreement = true
probes = true
probe_len = 512

[arms.dynamic]

[arms.static]
engine_args = {{ cache_implementation = "static", max_cache_len = 1024 }}
"""


def ab(out: Path, model: str, data: str, limit: int, max_tokens: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    exp = out / "experiment.toml"
    exp.write_text(experiment(model, data, limit, max_tokens))
    t0 = time.time()
    rc = abgate("ab", str(exp), "-o", str(out / "ab"), "--force", log=out / "ab.log")
    return {"rc": rc, "wall_s": round(time.time() - t0, 1), **ab_figures(out / "ab")}


def ab_figures(ab_dir: Path) -> dict[str, Any]:
    """The figures docs/gpu.md quotes, from an A/B directory's records."""
    comp = read(ab_dir / "comparison.json")["comparisons"]["static"]
    c = comp["comparison"]
    ab_doc = read(ab_dir / "ab.json")
    base = ab_doc["experiment"]["arms"][ab_doc["experiment"]["baseline"]]
    figures: dict[str, Any] = {
        "limit": base.get("limit"), "max_tokens": base.get("max_tokens"),
        "status": ab_doc.get("status"), "resumes": ab_doc.get("resumes"),
        "decision": comp["verdict"]["decision"], "reasons": comp["verdict"]["reasons"],
        "gates": {g["name"]: g["outcome"] for g in comp["verdict"]["gates"]},
        "identical_outputs": c.get("diagnostics", {}).get("identical_outputs"),
        "agreement": {k: c["agreement"].get(k) for k in
                      ("measured", "method", "n_items", "n_tokens", "mean_kld",
                       "top1_agreement")},
        "scoring": ab_doc.get("scoring"),
        "engines": {arm: {k: e["effective_config"].get(k) for k in
                          ("dtype", "cache_implementation", "max_cache_len", "compile",
                           "score_mode", "device_name", "attn_implementation",
                           "load_seconds")}
                    for arm, e in ab_doc["engines"].items()},
    }
    for arm in ("dynamic", "static"):
        run = read(ab_dir / "arms" / arm / "run.json")
        summ = read(ab_dir / "arms" / arm / "summary.json")
        figures[arm] = {"cleanup": run.get("cleanup"),
                        "speed": {k: v.get("median") if isinstance(v, dict) else v
                                  for k, v in (summ.get("speed") or {}).items()},
                        "quality": {k: summ["quality"].get(k) for k in
                                    ("n", "accuracy", "invalid_rate", "truncated_rate",
                                     "natural_stop_rate", "mean_output_tokens")}}
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("env", "bench", "ab", "ab-figures"))
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, help="bench: a tokenizer directory")
    ap.add_argument("--model", help="ab: the SmolLM2 GGUF file")
    ap.add_argument("--ab-dir", type=Path, help="ab-figures: an A/B directory")
    ap.add_argument("--data", help="ab: GSM8K test.jsonl")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.step == "env":
        figures = env(a.out)
    elif a.step == "bench":
        figures = bench(a.out, a.tokenizer, a.input_len, a.output_len, a.repeats)
    elif a.step == "ab":
        figures = ab(a.out, a.model, a.data, a.limit, a.max_tokens)
    else:
        figures = ab_figures(a.ab_dir)
    (a.out / f"figures-{a.step}.json").write_text(json.dumps(figures, indent=1, default=str))
    print(json.dumps(figures, indent=1, default=str)[:6000])


if __name__ == "__main__":
    main()
