"""Greedy determinism of the transformers engine on a GPU, and what breaks it (docs/gpu.md).

  python benchmarks/gpu_determinism.py dummy --tokenizer TOKDIR -o OUT
      a Llama-3-8B-shaped model with random weights (load_format=dummy, bf16): greedy
      128 tokens after the bench's 512-token prompt, repeated in one process, in one
      subprocess per mode (torch/cuBLAS settings differ only there): default (twice, so
      two processes compare), deterministic (CUBLAS_WORKSPACE_CONFIG=:4096:8 plus
      torch.use_deterministic_algorithms(True)), cublas-workspace (the variable alone),
      eager attention, and the static cache (compiled decode step). Each step's full
      logits are kept, so a divergence is explained: whether the logits were already
      different before it, and the top-2 logit gap where the argmax flipped.
  python benchmarks/gpu_determinism.py smollm2 --model SmolLM2.gguf --data test.jsonl -o OUT
      ``abgate run`` twice (two processes) per cache kind with seeds 0,1 (greedy: each
      item generated twice in one process), ``abgate baseline record`` + ``check``, and
      the token-ID comparison (--gaps: the top-2 log-prob gap where outputs diverged);
      the eight processes share one GPU at once, so speeds from this step are not figures
  python benchmarks/gpu_determinism.py lossless --model SmolLM2.gguf --data test.jsonl -o OUT
      ``abgate ab`` with expect = "lossless": plain greedy against SmolLM2 as its own
      draft model (assistant_model) and against device_map = "auto"

``--model-dir`` (dummy) takes any config-only model directory instead of the 8B shape,
and ``--device cpu`` runs the same code on a CPU (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_transformers import shape_dir  # noqa: E402

MODES: dict[str, dict[str, Any]] = {
    "default": {"env": {}, "args": {}},
    "default-again": {"env": {}, "args": {}},
    "deterministic": {"env": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, "args": {},
                      "use_deterministic_algorithms": True},
    "cublas-workspace": {"env": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, "args": {}},
    "eager-attention": {"env": {}, "args": {"attn_implementation": "eager"}},
    "static": {"env": {}, "args": {"cache_implementation": "static"}},
    "static-deterministic": {"env": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"},
                             "args": {"cache_implementation": "static"},
                             "use_deterministic_algorithms": True},
}


def read(path: Path) -> Any:
    return json.loads(path.read_text())


# -- the 8B random-weights study ----------------------------------------------------------


def _gaps(torch: Any, logits: Any) -> Any:
    """Top-1 minus top-2 logit per step."""
    top = torch.topk(logits, 2, dim=-1).values
    return (top[:, 0] - top[:, 1]).cpu()


def compare_runs(torch: Any, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Where run ``b`` leaves run ``a``: first token divergence, whether the logits were
    already different before it, and the top-2 gaps there."""
    ta, tb = a["tokens"], b["tokens"]
    div = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None)
    upto = len(ta) if div is None else div + 1  # same inputs up to and including div
    la, lb = a["logits"][:upto], b["logits"][:upto]
    differ = [i for i in range(upto) if not torch.equal(la[i], lb[i])]
    row: dict[str, Any] = {
        "identical_tokens": div is None, "first_divergence": div,
        "steps_compared": upto,
        "logits_bitwise_equal_steps": upto - len(differ),
        "first_step_logits_differ": differ[0] if differ else None,
        "max_abs_logit_diff": float((la - lb).abs().max()) if upto else 0.0,
    }
    if div is not None:
        ga, gb = a["gaps"][div], b["gaps"][div]
        row.update(top2_gap_at_divergence_a=float(ga), top2_gap_at_divergence_b=float(gb),
                   logit_diff_at_divergence=float((la[div] - lb[div]).abs().max()),
                   tokens_at_divergence=[ta[div], tb[div]])
    return row


def worker(a: argparse.Namespace) -> None:
    """One mode in this process: prefill repeats and ``--runs`` greedy generations."""
    spec = MODES[a.mode]
    import torch

    from abgate.bench.prompts import fixed_length_prompt
    from abgate.engines.base import SamplingParams
    from abgate.engines.transformers import engine as hf

    det = bool(spec.get("use_deterministic_algorithms"))
    det_error = None
    if det:
        torch.use_deterministic_algorithms(True)
    args = {"load_format": "dummy", "dtype": a.dtype, "device": a.device, **spec["args"]}
    if args.get("cache_implementation") == "static":
        args["max_cache_len"] = a.input_len + a.output_len
    e = hf.load(str(a.model_dir), args)
    m = e._model
    ids = fixed_length_prompt(e.tokenize, a.input_len)
    x = torch.tensor([ids], device=m.device)
    gcfg = e._generation_config(SamplingParams(max_tokens=a.output_len, ignore_eos=True))
    gcfg.return_dict_in_generate = True
    gcfg.output_logits = True
    runs, prefill, times = [], [], []
    try:
        with torch.no_grad():
            for _ in range(3):
                prefill.append(m(input_ids=x).logits[0, -1].float())
            for i in range(a.runs + 1):  # the first is a warm-up (compile, autotune)
                t0 = time.perf_counter()
                out = m.generate(input_ids=x, attention_mask=torch.ones_like(x),
                                 generation_config=gcfg)
                torch.cuda.synchronize() if x.is_cuda else None
                times.append(time.perf_counter() - t0)
                logits = torch.stack([s[0].float() for s in out.logits])
                runs.append({"tokens": out.sequences[0, len(ids):].tolist(), "logits": logits,
                             "gaps": _gaps(torch, logits), "warmup": i == 0})
    except RuntimeError as exc:  # e.g. an op without a deterministic implementation
        det_error = str(exc).strip().splitlines()[0]
    measured = [r for r in runs if not r["warmup"]]
    doc: dict[str, Any] = {
        "mode": a.mode, "engine_args": args, "env": spec["env"],
        "use_deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "error": det_error, "seconds_per_generation": [round(t, 3) for t in times],
        "prompt_tokens": len(ids), "output_tokens": a.output_len,
        "effective_config": {k: e.describe().effective_config.get(k) for k in
                             ("attn_implementation", "cache_implementation", "compile",
                              "dtype", "device_name", "torch_version",
                              "transformers_version", "cuda_version")},
        "prefill_repeats_bitwise_equal": all(torch.equal(prefill[0], p) for p in prefill),
    }
    if runs:
        allsteps = torch.cat([r["gaps"] for r in runs])
        doc["top2_gap"] = {"median": float(allsteps.median()),
                           "min": float(allsteps.min()),
                           "share_below_0.01": float((allsteps < 0.01).float().mean()),
                           "share_below_0.1": float((allsteps < 0.1).float().mean()),
                           "logit_std_median": float(runs[0]["logits"].std(dim=-1).median())}
        doc["warmup_vs_first"] = compare_runs(torch, runs[0], measured[0]) if measured else None
        doc["pairs"] = {f"{i}-{j}": compare_runs(torch, measured[i], measured[j])
                        for i, j in combinations(range(len(measured)), 2)}
        doc["identical_measured_runs"] = all(p["identical_tokens"]
                                             for p in doc["pairs"].values())
        doc["runs"] = [{"tokens": r["tokens"], "gaps": [round(float(g), 5) for g in r["gaps"]],
                        "warmup": r["warmup"]} for r in runs]
        torch.save([r["logits"][:, :].cpu() for r in measured[:1]],
                   a.out / f"logits-{a.mode}.pt") if a.keep_logits else None
    e.close()
    (a.out / f"mode-{a.mode}.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps({k: doc.get(k) for k in ("mode", "error", "identical_measured_runs",
                                              "prefill_repeats_bitwise_equal", "top2_gap")}),
          flush=True)
    for k, p in (doc.get("pairs") or {}).items():
        print(a.mode, k, json.dumps(p), flush=True)


def dummy(a: argparse.Namespace) -> dict[str, Any]:
    model = a.model_dir or shape_dir(a.out / "llama3-8b-shape", a.tokenizer)
    modes = a.modes.split(",")
    figures: dict[str, Any] = {"modes": {}, "model": str(model)}
    t_start = time.time()
    for mode in modes:
        if time.time() - t_start > a.budget_s:
            figures["modes"][mode] = {"skipped": f"over the {a.budget_s} s budget"}
            continue
        env = {**os.environ, **MODES[mode]["env"]}
        cmd = [sys.executable, __file__, "_worker", "--mode", mode, "--model-dir", str(model),
               "-o", str(a.out), "--runs", str(a.runs), "--input-len", str(a.input_len),
               "--output-len", str(a.output_len), "--device", a.device, "--dtype", a.dtype]
        t0 = time.time()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.mode_timeout)
        (a.out / f"mode-{mode}.log").write_text(p.stdout + p.stderr)
        print(f"== {mode}: rc {p.returncode}, {time.time() - t0:.0f} s\n{p.stdout[-3000:]}",
              flush=True)
        if p.returncode != 0:
            print(p.stderr[-3000:], flush=True)
        f = a.out / f"mode-{mode}.json"
        doc = read(f) if f.is_file() else {"error": f"rc {p.returncode}"}
        figures["modes"][mode] = {k: v for k, v in doc.items() if k != "runs"} | {
            "rc": p.returncode, "wall_s": round(time.time() - t0, 1)}
    # across processes: the first measured run of each mode against default's
    docs = {m: read(a.out / f"mode-{m}.json") for m in modes
            if (a.out / f"mode-{m}.json").is_file()}
    if "default" in docs:
        ref = [r for r in docs["default"].get("runs", []) if not r["warmup"]]
        cross = {}
        for m, d in docs.items():
            runs = [r for r in d.get("runs", []) if not r["warmup"]]
            if m == "default" or not runs or not ref:
                continue
            ta, tb = ref[0]["tokens"], runs[0]["tokens"]
            div = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y),
                       None)
            cross[m] = {"identical_tokens": div is None, "first_divergence": div,
                        "top2_gap_at_divergence": None if div is None else
                        [ref[0]["gaps"][div], runs[0]["gaps"][div]]}
        figures["across_processes_vs_default"] = cross
    return figures


# -- SmolLM2 (a real model) ---------------------------------------------------------------


def abgate(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[
        str]:
    f = log.open("w")
    f.write("$ abgate " + " ".join(args) + "\n")
    f.flush()
    return subprocess.Popen([sys.executable, "-m", "abgate", *args], stdout=f,
                            stderr=subprocess.STDOUT, text=True, env=env)


def _samples(run_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        s = json.loads(line)
        if not s.get("warmup"):
            out[s["key"]] = s
    return out


def _div(a: list[int] | None, b: list[int] | None) -> int | None:
    a, b = a or [], b or []
    d = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    return d if d is not None else (None if len(a) == len(b) else min(len(a), len(b)))


def identity(run_a: Path, run_b: Path) -> dict[str, Any]:
    """Token identity of two ``abgate run`` directories of one spec with seeds 0,1 (greedy:
    the two seeds are the same generation twice in one process)."""
    sa, sb = _samples(run_a), _samples(run_b)

    def item(key: str) -> tuple[str, int]:
        base, _, seed = key.rpartition("#")
        return base, int(seed)

    def ids(s: dict[str, Any]) -> list[int] | None:
        return s["output"]["token_ids"]  # type: ignore[no-any-return]

    within, across = [], []
    for name, samples in (("A", sa), ("B", sb)):
        by_item: dict[str, dict[int, dict[str, Any]]] = {}
        for k, s in samples.items():
            base, seed = item(k)
            by_item.setdefault(base, {})[seed] = s
        for base, seeds in sorted(by_item.items()):
            if 0 in seeds and 1 in seeds:
                within.append({"run": name, "item": base,
                               "divergence": _div(ids(seeds[0]), ids(seeds[1])),
                               "pair": [ids(seeds[0]), ids(seeds[1])]})
    for k in sorted(set(sa) & set(sb)):
        across.append({"key": k, "divergence": _div(ids(sa[k]), ids(sb[k])),
                       "pair": [ids(sa[k]), ids(sb[k])],
                       "prompt": sa[k]["prompt"].get("sha256")})
    return {"in_process_pairs": len(within),
            "in_process_identical": sum(w["divergence"] is None for w in within),
            "across_process_pairs": len(across),
            "across_process_identical": sum(x["divergence"] is None for x in across),
            "output_tokens_compared": sum(len(x["pair"][0] or []) for x in across),
            "divergent": [{k: v for k, v in d.items() if k != "pair"}
                          for d in within + across if d["divergence"] is not None]}


def smollm2(a: argparse.Namespace) -> dict[str, Any]:
    common = ["--engine", "transformers", "--model", a.model, "--suite", "gsm8k", "--data",
              a.data, "--limit", str(a.limit), "--seeds", "0,1", "--max-tokens",
              str(a.max_tokens), "--engine-arg", f"dtype={a.dtype}",
              "--engine-arg", f"device={a.device}"]
    kinds = {"dynamic": [], "static": ["--engine-arg", "cache_implementation=static",
                                       "--engine-arg", "max_cache_len=1024"]}
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    procs = {}
    t0 = time.time()
    for kind, extra in kinds.items():
        for rep in ("A", "B"):
            procs[f"run-{kind}-{rep}"] = abgate(
                ["run", *common, *extra, "-o", str(a.out / f"run-{kind}-{rep}"), "--force"],
                a.out / f"run-{kind}-{rep}.log", env)
    # the reproducibility feature itself: record in one process, check in another
    base = {}
    for kind, extra in kinds.items():
        d = a.out / f"baseline-{kind}"
        base[kind] = ["baseline", "record", "--engine", "transformers", "--model", a.model,
                      "--engine-arg", f"dtype={a.dtype}", "--engine-arg", f"device={a.device}",
                      *extra,
                      "--input-len", "128,512", "--output-len", "128", "--repeats", "3",
                      "--no-probes", "-o", str(d), "--force"]
        procs[f"baseline-{kind}"] = abgate(base[kind], a.out / f"baseline-{kind}.log", env)
    rcs = {k: p.wait(timeout=a.timeout) for k, p in procs.items() if k.startswith("baseline")}
    checks = {kind: abgate(["baseline", "check", str(a.out / f"baseline-{kind}"),
                            "--tolerance", "1", "--json",
                            str(a.out / f"baseline-{kind}" / "check.json")],
                           a.out / f"baseline-check-{kind}.log", env) for kind in kinds}
    rcs |= {f"check-{k}": p.wait(timeout=a.timeout) for k, p in checks.items()}
    rcs |= {k: p.wait(timeout=a.timeout) for k, p in procs.items() if k.startswith("run")}
    figures: dict[str, Any] = {"rc": rcs, "wall_s": round(time.time() - t0, 1),
                               "limit": a.limit, "max_tokens": a.max_tokens}
    for kind in kinds:
        try:
            figures[f"runs-{kind}"] = identity(a.out / f"run-{kind}-A",
                                               a.out / f"run-{kind}-B")
        except (OSError, KeyError, ValueError) as exc:
            figures[f"runs-{kind}"] = {"error": str(exc)}
        bdir = a.out / f"baseline-{kind}"
        try:
            rec, chk = read(bdir / "baseline.json"), read(bdir / "check.json")
            figures[f"baseline-{kind}"] = {
                "record_outputs_identical_across_repeats": [
                    c.get("outputs_identical") for c in rec["cases"]],
                "check": chk}
        except (OSError, KeyError, ValueError) as exc:
            figures[f"baseline-{kind}"] = {"error": str(exc)}
    if a.gaps:
        try:
            figures["divergence_gaps"] = divergence_gaps(a, figures)
        except Exception as exc:  # the figures above must still be written
            figures["divergence_gaps"] = {"error": f"{type(exc).__name__}: {exc}"}
    return figures


def divergence_gaps(a: argparse.Namespace, figures: dict[str, Any]) -> dict[str, Any]:
    """Top-2 log-prob gaps (= logit gaps) where the greedy outputs diverged: each
    divergent pair's common prefix scored by a fresh dynamic-cache engine."""
    from abgate.engines.transformers import engine as hf

    out: dict[str, Any] = {}
    pairs = []
    for kind in ("dynamic", "static"):
        ia = figures.get(f"runs-{kind}") or {}
        if not ia.get("divergent"):
            continue
        samples = _samples(a.out / f"run-{kind}-A")
        for d in ia["divergent"][:20]:
            key = d.get("key") or next((k for k in samples if k.startswith(d["item"] + "#")),
                                       None)
            if key in samples:
                pairs.append((kind, key, samples[key], d["divergence"]))
    if not pairs:
        return {"pairs": 0}
    e = hf.load(a.model, {"dtype": a.dtype, "device": a.device})
    try:
        rows = []
        for kind, key, s, pos in pairs:
            prompt, toks = e.render_prompt(s["prompt"]["messages"]), s["output"]["token_ids"]
            sc = e.score(prompt, toks[:pos + 1], top_k=2)
            gap = float(sc.top_logprobs[pos, 0] - sc.top_logprobs[pos, 1])
            rows.append({"kind": kind, "key": key, "position": pos, "top2_gap": gap})
        out["rows"] = rows
    finally:
        e.close()
    return out


# -- the lossless A/B ---------------------------------------------------------------------


def lossless_experiment(model: str, data: str, limit: int, max_tokens: int, draft: int,
                        device: str = "cuda", dtype: str = "bfloat16") -> str:
    return f"""# SmolLM2-135M-Instruct (bf16) on an H200: switches that must not change a greedy
# output. Speculative decoding with the model as its own draft, and accelerate's
# device_map = "auto" placement, each against plain greedy decoding.
name = "gpu-smollm2-lossless"
description = "transformers on CUDA: greedy speculative decoding and device_map, token for token"
baseline = "plain"
expect = "lossless"

[shared]
engine = "transformers"
model = "{model}"
suite = "gsm8k"
data = "{data}"
limit = {limit}
seeds = [0]
max_tokens = {max_tokens}
temperature = 0.0
engine_args = {{ dtype = "{dtype}", score_mode = "prefill" }}

[schedule]
mode = "interleave"
warmup = 1

[evidence]
agreement = true
probes = false

[arms.plain]
engine_args = {{ device = "{device}" }}

[arms.assisted]
engine_args = {{ device = "{device}", assistant_model = "{model}", num_assistant_tokens = {draft} }}

[arms.device-map-auto]
engine_args = {{ device_map = "auto" }}
"""


def lossless(a: argparse.Namespace) -> dict[str, Any]:
    exp = a.out / "experiment.toml"
    exp.write_text(lossless_experiment(a.model, a.data, a.limit, a.max_tokens, a.draft,
                                       a.device, a.dtype))
    t0 = time.time()
    p = abgate(["ab", str(exp), "-o", str(a.out / "ab"), "--force"], a.out / "ab.log")
    rc = p.wait()
    figures: dict[str, Any] = {"rc": rc, "wall_s": round(time.time() - t0, 1)}
    try:
        figures |= lossless_figures(a.out / "ab")
    except (OSError, KeyError, ValueError) as exc:
        figures["error"] = str(exc)
    return figures


def lossless_figures(ab_dir: Path) -> dict[str, Any]:
    comp = read(ab_dir / "comparison.json")["comparisons"]
    ab_doc = read(ab_dir / "ab.json")
    figures: dict[str, Any] = {"status": ab_doc.get("status"), "arms": {}}
    base = _samples(ab_dir / "arms" / "plain")
    for arm, c in comp.items():
        cand = _samples(ab_dir / "arms" / arm)
        divs = [_div(base[k]["output"]["token_ids"], cand[k]["output"]["token_ids"])
                for k in sorted(set(base) & set(cand))]
        figures["arms"][arm] = {
            "decision": c["verdict"]["decision"], "reasons": c["verdict"]["reasons"],
            "gates": {g["name"]: g["outcome"] for g in c["verdict"]["gates"]},
            "identical_outputs": c["comparison"].get("diagnostics", {}).get(
                "identical_outputs"),
            "pairs": len(divs), "identical": sum(d is None for d in divs),
            "first_divergences": sorted(d for d in divs if d is not None),
            "agreement": {k: c["comparison"].get("agreement", {}).get(k) for k in
                          ("measured", "method", "n_tokens", "mean_kld", "top1_agreement")}}
    for arm in ("plain", *comp):
        run = read(ab_dir / "arms" / arm / "run.json")
        summ = read(ab_dir / "arms" / arm / "summary.json")
        eff = run["engine"]["effective_config"]
        figures["arms"].setdefault(arm, {}).update(
            speed={k: v.get("median") if isinstance(v, dict) else v
                   for k, v in (summ.get("speed") or {}).items()},
            cleanup=run.get("cleanup"),
            engine={k: eff.get(k) for k in ("device", "device_map", "device_map_placed",
                                            "assistant_model", "score_mode", "dtype",
                                            "load_seconds", "deterministic")})
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("dummy", "_worker", "smollm2", "lossless",
                                     "lossless-figures"))
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, help="dummy: a tokenizer directory")
    ap.add_argument("--model-dir", type=Path, help="dummy: a config-only model directory")
    ap.add_argument("--modes", default="default,deterministic,default-again,cublas-workspace,"
                    "eager-attention,static,static-deterministic")
    ap.add_argument("--mode", choices=tuple(MODES))
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--mode-timeout", type=float, default=240.0)
    ap.add_argument("--keep-logits", action="store_true")
    ap.add_argument("--model", help="smollm2 / lossless: the model (GGUF file or directory)")
    ap.add_argument("--data", help="GSM8K test.jsonl")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--draft", type=int, default=8, help="lossless: num_assistant_tokens")
    ap.add_argument("--timeout", type=float, default=480.0)
    ap.add_argument("--gaps", action="store_true", help="smollm2: score divergences")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.step == "_worker":
        worker(a)
        return
    figures = {"dummy": dummy, "smollm2": smollm2, "lossless": lossless,
               "lossless-figures": lambda a: lossless_figures(a.out / "ab")}[a.step](a)
    (a.out / f"figures-{a.step}.json").write_text(json.dumps(figures, indent=1, default=str))
    print(json.dumps(figures, indent=1, default=str)[:8000], flush=True)


if __name__ == "__main__":
    main()
