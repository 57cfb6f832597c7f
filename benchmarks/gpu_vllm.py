"""abgate on real vLLM (0.26) on one H200: the figures of docs/gpu.md, "vLLM".

Run on the GPU machine after ``../shared/gpu/stage-vllm.sh``'s calls (vLLM staged in
/tmp/site, SmolLM2-135M-Instruct converted to a bf16 directory by ``vllm_convert_smol``),
from the project root with abgate installed (``vllm_install_checkout``)::

  python benchmarks/gpu_vllm.py STEP --model /root/m/smol --data GSM8K.jsonl -o OUT

Steps (each writes its records under OUT/STEP and OUT/figures-STEP.json):

  tests        tests/test_vllm_engine.py against real vLLM (ABGATE_VLLM_MODEL=--model)
  ab-fp8       the fast-path A/B in-process: bf16 against vLLM's dynamic FP8 weights
               (quantization=fp8), and FP8 weights with an FP8 KV cache, interleaved,
               --limit GSM8K items, greedy, agreement (prompt_logprobs) and probes
  lossless     expect = "lossless": CUDA graphs + torch.compile against enforce_eager
  xengine      the same bf16 weights scored teacher-forced by transformers (full
               vocabulary) and by vLLM (top-k): the cross-engine agreement
  baseline     abgate baseline record, then baseline check in a new process
  baseline-repro  baseline record; baseline check on the same build (expects exit 0:
               GPU memory and num_gpu_blocks are volatile, not drift); and an A/B whose
               arm b sets an hf_overrides key vLLM ignores (expects the "changed nothing
               observable after load" warning in its verdict)
  ab-fp8-served  the ab-fp8 pair through `vllm serve` servers that abgate launches
  bench        abgate bench on a Llama-3-8B-shaped dummy (--dummy DIR, load_format=dummy)
               at batch 1 in-process and at concurrency 8 and 32 served, each beside
               vLLM's own `vllm bench latency` / `vllm bench serve` on the same shapes,
               and the ratios abgate / vLLM for TTFT, TPOT and output tok/s
  all          the steps above in this order (or --steps a,b,...), each in its own
               process, until --deadline seconds have passed (a step that fails does not
               stop the rest)

Every A/B is an ``abgate ab`` of an experiment file written next to its records
(OUT/STEP/experiment.toml), so ``abgate ab OUT/STEP/experiment.toml -o DIR`` repeats it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VLLM_ARGS = 'dtype = "bfloat16", max_model_len = 2048, gpu_memory_utilization = 0.25'
SERVE_ARGS = ('dtype = "bfloat16", max-model-len = 2048, gpu-memory-utilization = 0.25, '
              'enable-prefix-caching = false')
ORDER = ("tests", "ab-fp8", "lossless", "xengine", "baseline", "baseline-repro",
         "ab-fp8-served", "bench")
SHAPE = {"input_len": 512, "output_len": 128}
# Meta-Llama-3-8B: 8,030,261,248 parameters at 2 B, less the embedding table (128,256 x
# 4,096), of which decoding reads one row: the in-process bench's own meta-device count
LLAMA3_8B_DECODE_BYTES = (8_030_261_248 - 128_256 * 4_096) * 2


def sh(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    """Run ``cmd``, its output appended to ``log`` and its tail printed."""
    print("$ " + " ".join(cmd), flush=True)
    with log.open("a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, **(env or {})})
        f.write(p.stdout + f"\n[exit {p.returncode}]\n")
    print(p.stdout[-3000:], flush=True)
    return p.returncode


def abgate(*args: str, log: Path) -> int:
    return sh([sys.executable, "-m", "abgate", *args], log)


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def experiment(name: str, baseline: str, shared: str, arms: str, *, expect: str = "",
               probes: bool = True) -> str:
    return f"""name = "{name}"
baseline = "{baseline}"
{f'expect = "{expect}"' if expect else ""}

[shared]
seeds = [0]
temperature = 0.0
{shared}

[schedule]
mode = "interleave"
warmup = 2

[evidence]
agreement = true
probes = {"true" if probes else "false"}
probe_len = 512

{arms}
"""


def gsm8k(a: argparse.Namespace, limit: int, max_tokens: int) -> str:
    return (f'suite = "gsm8k"\ndata = "{Path(a.data).resolve()}"\nlimit = {limit}\n'
            f"max_tokens = {max_tokens}")


FP8_ARMS = """[arms.bf16]

[arms.fp8]
engine_args = {{ {q} }}

[arms.fp8-kv8]
engine_args = {{ {q}, {kv} }}
"""


def exp_ab_fp8(a: argparse.Namespace) -> str:
    shared = (f'engine = "vllm"\nmodel = "{a.model}"\n{gsm8k(a, a.limit, a.max_tokens)}\n'
              f"engine_args = {{ {VLLM_ARGS} }}")
    arms = FP8_ARMS.format(q='quantization = "fp8"', kv='kv_cache_dtype = "fp8"')
    return experiment("vllm-fp8-fast-path", "bf16", shared, arms)


def exp_ab_fp8_served(a: argparse.Namespace) -> str:
    shared = (f'engine = "openai"\nmodel = "{a.model}"\n{gsm8k(a, a.limit, a.max_tokens)}\n'
              f"engine_args = {{ {SERVE_ARGS} }}\n\n[shared.engine_options]\n"
              'launch = "vllm serve {model} --host {host} --port {port}"\n'
              "ready_timeout = 600.0")
    arms = FP8_ARMS.format(q='quantization = "fp8"', kv='kv-cache-dtype = "fp8"')
    return experiment("vllm-fp8-fast-path-served", "bf16", shared, arms)


def exp_lossless(a: argparse.Namespace) -> str:
    shared = (f'engine = "vllm"\nmodel = "{a.model}"\n{gsm8k(a, a.limit // 2, a.max_tokens)}\n'
              f"engine_args = {{ {VLLM_ARGS} }}")
    arms = "[arms.eager]\nengine_args = { enforce_eager = true }\n\n[arms.graphs]\n"
    return experiment("vllm-graphs-lossless", "eager", shared, arms, expect="lossless",
                      probes=False)


def exp_xengine(a: argparse.Namespace) -> str:
    shared = gsm8k(a, 30, 128)
    arms = (f'[arms.transformers]\nengine = "transformers"\nmodel = "{a.model}"\n'
            'engine_args = { dtype = "bfloat16", device = "cuda" }\n\n'
            f'[arms.vllm]\nengine = "vllm"\nmodel = "{a.model}"\n'
            f"engine_args = {{ {VLLM_ARGS} }}\n")
    return experiment("cross-engine-agreement", "transformers", shared, arms, probes=False)


EXPERIMENTS = {"ab-fp8": exp_ab_fp8, "ab-fp8-served": exp_ab_fp8_served,
               "lossless": exp_lossless, "xengine": exp_xengine}


def run_ab(step: str, a: argparse.Namespace, out: Path) -> dict[str, Any]:
    exp = out / "experiment.toml"
    exp.write_text(EXPERIMENTS[step](a))
    t0 = time.time()
    rc = abgate("ab", str(exp), "-o", str(out / "ab"), "--force", log=out / "ab.log")
    figures = {"rc": rc, "wall_s": round(time.time() - t0, 1)}
    if (out / "ab" / "comparison.json").exists():
        figures |= ab_figures(out / "ab")
    return figures


def ab_figures(ab_dir: Path) -> dict[str, Any]:
    """The verdict, gates, agreement, speed and cleanup of every arm of an A/B."""
    doc, comps = read(ab_dir / "ab.json"), read(ab_dir / "comparison.json")["comparisons"]
    figures: dict[str, Any] = {"status": doc.get("status"), "scoring": doc.get("scoring"),
                               "candidates": {}, "arms": {}}
    for arm, comp in comps.items():
        c = comp["comparison"]
        figures["candidates"][arm] = {
            "decision": comp["verdict"]["decision"], "reasons": comp["verdict"]["reasons"],
            "gates": {g["name"]: g["outcome"] for g in comp["verdict"]["gates"]},
            "identical_outputs": c.get("diagnostics", {}).get("identical_outputs"),
            "agreement": {k: (c.get("agreement") or {}).get(k) for k in
                          ("measured", "method", "k", "n_items", "n_tokens", "mean_kld",
                           "mean_kld_ci", "top1_agreement", "top1_ci")},
            "speed": c.get("speed")}
    for arm_dir in sorted((ab_dir / "arms").iterdir()):
        run, summ = read(arm_dir / "run.json"), read(arm_dir / "summary.json")
        eff = (run.get("engine") or {}).get("effective_config") or {}
        figures["arms"][arm_dir.name] = {
            "effective": {k: eff.get(k) for k in
                          ("quantization", "kv_cache_dtype", "num_gpu_blocks", "graph_mode",
                           "compilation_mode", "cudagraph_mode", "attention_backend",
                           "enable_prefix_caching", "prefix_cache", "server_kind",
                           "dtype", "device_name")},
            "cleanup": run.get("cleanup"),
            "speed": {k: v.get("median") if isinstance(v, dict) else v
                      for k, v in (summ.get("speed") or {}).items()},
            "quality": {k: (summ.get("quality") or {}).get(k) for k in
                        ("n", "accuracy", "invalid_rate", "truncated_rate",
                         "natural_stop_rate", "n_errors", "mean_output_tokens")}}
    return figures


def step_tests(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    rc = sh([sys.executable, "-m", "pytest", "tests/test_vllm_engine.py", "-v", "-p",
             "no:randomly", "-p", "no:cacheprovider"], out / "pytest.log",
            env={"ABGATE_VLLM_MODEL": a.model})
    tail = (out / "pytest.log").read_text().strip().splitlines()[-1:]
    return {"rc": rc, "summary": tail}


def step_baseline(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    log, base = out / "baseline.log", out / "baseline"
    args = ["--engine", "vllm", "--model", a.model, "--engine-arg", "dtype=bfloat16",
            "--engine-arg", "max_model_len=2048", "--engine-arg", "gpu_memory_utilization=0.3"]
    rc_record = abgate("baseline", "record", *args, "--input-len", "128,512", "--output-len",
                       "64", "--repeats", "3", "--probe-len", "512", "-o", str(base),
                       "--force", log=log)
    rc_check = abgate("baseline", "check", str(base), "--json", str(out / "check.json"),
                      log=log)
    figures: dict[str, Any] = {"rc_record": rc_record, "rc_check": rc_check}
    if (out / "check.json").exists():
        figures["check"] = read(out / "check.json")
    if (base / "baseline.json").exists():
        figures["record_cleanup"] = read(base / "baseline.json").get("cleanup")
    return figures


NO_OP = "changed nothing observable after load"


def step_baseline_repro(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Record, check on the same build (exit 0 expected), and an ignored-override A/B."""
    log, base = out / "repro.log", out / "baseline"
    args = ["--engine", "vllm", "--model", a.model, "--engine-arg", "dtype=bfloat16",
            "--engine-arg", "max_model_len=2048", "--engine-arg", "gpu_memory_utilization=0.3"]
    rc_record = abgate("baseline", "record", *args, "--input-len", "128", "--output-len",
                       "32", "--repeats", "3", "--no-probes", "-o", str(base), "--force",
                       log=log)
    rc_check = abgate("baseline", "check", str(base), "--json", str(out / "check.json"),
                      log=log)
    conf = read(out / "check.json").get("configuration") if (out / "check.json").exists() \
        else None
    shared = (f'engine = "vllm"\nmodel = "{a.model}"\n{gsm8k(a, 12, 64)}\n'
              f"engine_args = {{ {VLLM_ARGS} }}")
    arms = ('[arms.a]\n\n[arms.b]\nchanges = ["hf_overrides"]\n'
            'engine_args = { hf_overrides = { rope_theta = 1.0 } }\n')
    exp = out / "noop.toml"
    exp.write_text(experiment("vllm-ignored-override", "a", shared, arms, probes=False))
    rc_ab = abgate("ab", str(exp), "-o", str(out / "ab"), "--force", log=log)
    notes: list[str] = []
    if (out / "ab" / "comparison.json").exists():
        notes = read(out / "ab" / "comparison.json")["comparisons"]["b"]["verdict"]["notes"]
    unchanged = (read(out / "ab" / "ab.json").get("differences", {}).get("b", {})
                 .get("unchanged")) if (out / "ab" / "ab.json").exists() else None
    return {"rc_record": rc_record, "rc_check": rc_check, "check_ok": rc_check == 0,
            "configuration": conf, "rc_ab": rc_ab, "unchanged": unchanged,
            "no_op_warning": any(NO_OP in n for n in notes), "notes": notes}


def _bench_case(summary_path: Path) -> dict[str, Any]:
    case = read(summary_path)["cases"][0]
    med = {k: (case["speed"].get(k) or {}).get("median") for k in
           ("ttft_s", "tpot_ms", "steady_decode_tps", "e2e_s")}
    tpot = med.pop("tpot_ms")
    return {**med, "tpot_s": tpot / 1e3 if tpot is not None else None,
            "throughput_tps": (case.get("throughput_tps") or {}).get("median"),
            "roofline": case.get("roofline"), "concurrency": case.get("concurrency")}


def _latency(a: argparse.Namespace, out: Path, output_len: int) -> float | None:
    path = out / f"vllm-latency-out{output_len}.json"
    sh(["vllm", "bench", "latency", "--model", a.dummy, "--load-format", "dummy",
        "--input-len", str(SHAPE["input_len"]), "--output-len", str(output_len),
        "--batch-size", "1", "--num-iters-warmup", "2", "--num-iters", "5",
        "--max-model-len", "2048", "--output-json", str(path)], out / "bench.log")
    return float(read(path)["avg_latency"]) if path.exists() else None


def _serve_bench(a: argparse.Namespace, out: Path, levels: tuple[int, ...]) -> dict[str, Any]:
    """`vllm serve` started here (not by abgate), `vllm bench serve` per concurrency."""
    port, log = 8765, (out / "vllm-serve.log").open("ab")
    server = subprocess.Popen(["vllm", "serve", a.dummy, "--load-format", "dummy",
                               "--max-model-len", "2048", "--no-enable-prefix-caching",
                               "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    got: dict[str, Any] = {}
    try:
        import httpx

        deadline = time.time() + 600
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(2)
        for c in levels:
            name = f"vllm-serve-c{c}.json"
            sh(["vllm", "bench", "serve", "--backend", "vllm", "--model", a.dummy,
                "--base-url", f"http://127.0.0.1:{port}", "--dataset-name", "random",
                "--random-input-len", str(SHAPE["input_len"]), "--random-output-len",
                str(SHAPE["output_len"]), "--ignore-eos", "--num-prompts", str(5 * c),
                "--max-concurrency", str(c), "--save-result", "--result-dir", str(out),
                "--result-filename", name], out / "bench.log")
            if (out / name).exists():
                r = read(out / name)
                got[str(c)] = {"ttft_s": r["median_ttft_ms"] / 1e3,
                               "tpot_s": r["median_tpot_ms"] / 1e3,
                               "throughput_tps": r["output_throughput"]}
    finally:
        server.terminate()
        server.wait(timeout=60)
        gpu_idle(out / "bench.log")
    return got


def gpu_idle(log: Path, limit_mib: int = 2048, wait_s: float = 120) -> None:
    """Wait until the GPU's used memory is below ``limit_mib`` (the last server's workers
    gone) so that the next engine does not start on a half-full GPU; log the reading."""
    deadline, used = time.time() + wait_s, -1
    while time.time() < deadline:
        query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
        out = subprocess.run(query, capture_output=True, text=True).stdout.split()
        used = int(out[0]) if out else -1
        if 0 <= used < limit_mib:
            break
        time.sleep(2)
    with log.open("a") as f:
        f.write(f"gpu_idle: {used} MiB used on GPU 0\n")


def step_bench(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """abgate's figures beside vLLM's own on one shape, and their ratios."""
    shape = ["--input-len", str(SHAPE["input_len"]), "--output-len", str(SHAPE["output_len"]),
             "--warmup", "2"]
    figures: dict[str, Any] = {"shape": SHAPE}
    abgate("bench", "--engine", "vllm", "--model", a.dummy, "--engine-arg", "load_format=dummy",
           "--engine-arg", "max_model_len=2048", *shape, "--repeats", "5", "-o",
           str(out / "abgate-b1"), "--force", log=out / "bench.log")
    mine = _bench_case(out / "abgate-b1" / "summary.json")
    ttft, e2e = _latency(a, out, 1), _latency(a, out, SHAPE["output_len"])
    theirs = {"ttft_s": ttft, "e2e_s": e2e, "tpot_s": (e2e - ttft) / (SHAPE["output_len"] - 1)
              if ttft and e2e else None}
    figures["batch1"] = {"abgate": mine, "vllm_bench_latency": theirs,
                         "ratio": _ratios(mine, theirs, ("ttft_s", "tpot_s"))}
    levels = (8, 32)
    gpu_idle(out / "bench.log")
    served = _serve_bench(a, out, levels)
    for c in levels:
        abgate("bench", "--engine", "openai", "--model", a.dummy, "--launch",
               "vllm serve {model} --host {host} --port {port}", "--engine-arg",
               "load-format=dummy", "--engine-arg", "max-model-len=2048", "--engine-arg",
               "enable-prefix-caching=false", "--concurrency", str(c), "--ready-timeout", "600",
               # a served engine's roofline: the H200's datasheet bandwidth and the bytes
               # decoding reads per token, declared (abgate cannot see a server's GPU or
               # parameters). The 2026-12-01 run declared every parameter (16,060,522,496)
               "--peak-bw", "4800", "--weights-bytes", str(LLAMA3_8B_DECODE_BYTES),
               *shape, "--repeats", "5", "-o", str(out / f"abgate-c{c}"), "--force",
               log=out / "bench.log")
        mine = _bench_case(out / f"abgate-c{c}" / "summary.json")
        theirs = served.get(str(c), {})
        figures[f"served_c{c}"] = {"abgate": mine, "vllm_bench_serve": theirs,
                                   "ratio": _ratios(mine, theirs,
                                                    ("ttft_s", "tpot_s", "throughput_tps"))}
    return figures


def _ratios(mine: dict[str, Any], theirs: dict[str, Any], keys: tuple[str, ...]
            ) -> dict[str, float | None]:
    return {k: mine[k] / theirs[k] if mine.get(k) and theirs.get(k) else None for k in keys}


def step_all(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    t0, done = time.time(), {}
    for step in a.steps.split(","):
        if time.time() - t0 > a.deadline:
            done[step] = "skipped: deadline"
            continue
        t = time.time()
        rc = sh([sys.executable, __file__, step, "--model", a.model, "--data", a.data,
                 "--dummy", a.dummy, "--limit", str(a.limit), "--max-tokens",
                 str(a.max_tokens), "-o", str(out)], out / "all.log")
        done[step] = {"rc": rc, "wall_s": round(time.time() - t, 1)}
        (out / "progress.json").write_text(json.dumps(done, indent=1))
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=(*ORDER, "all"))
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--model", required=True, help="a vLLM model directory (bf16 SmolLM2)")
    ap.add_argument("--data", required=True, help="GSM8K test.jsonl")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--dummy", default="/root/m/llama3-8b-dummy",
                    help="bench: a Llama-3-8B-shaped config directory (vllm_dummy_llama3)")
    ap.add_argument("--deadline", type=float, default=1e9, help="all: seconds")
    ap.add_argument("--steps", default=",".join(ORDER), help="all: the steps, in order")
    a = ap.parse_args()
    if bad := set(a.steps.split(",")) - set(ORDER):
        ap.error(f"--steps: unknown step(s) {', '.join(sorted(bad))}; known: {', '.join(ORDER)}")
    out = a.out if a.step == "all" else a.out / a.step
    out.mkdir(parents=True, exist_ok=True)
    if a.step == "all":
        figures = step_all(a, out)
    elif a.step == "tests":
        figures = step_tests(a, out)
    elif a.step == "baseline":
        figures = step_baseline(a, out)
    elif a.step == "baseline-repro":
        figures = step_baseline_repro(a, out)
    elif a.step == "bench":
        figures = step_bench(a, out)
    else:
        figures = run_ab(a.step, a, out)
    (a.out / f"figures-{a.step}.json").write_text(json.dumps(figures, indent=1, default=str))
    print(json.dumps(figures, indent=1, default=str)[:4000], flush=True)


if __name__ == "__main__":
    main()
