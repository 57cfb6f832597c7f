"""abgate on real vLLM at tensor_parallel_size 2 (issue 23, items 1-4), for the two-GPU kind.

NOT RUN YET: the two-GPU machine (nvidia-h200-x2) was not lent when this was written, so
no figure exists; docs/gpu.md, "Tensor parallel", says what each step is for. Run on a
two-GPU machine after ``../shared/gpu/stage-vllm.sh``'s calls (vLLM staged, SmolLM2
converted by ``vllm_convert_smol``, the Llama-3-8B-shaped config by ``vllm_dummy_llama3``,
abgate installed by ``vllm_install_checkout``), from the project root::

  python benchmarks/gpu_vllm_tp.py STEP --data GSM8K.jsonl -o OUT

Steps (each writes its records under OUT/STEP and OUT/figures-STEP.json):

  env          GPUs (NVML), `nvidia-smi topo -m`, the multicast-off variables; exits 3
               unless at least 2 GPUs are visible (every later step needs them)
  tests        the TP code paths' tests (stand-in ranks) and tests/test_vllm_engine.py
               against real vLLM
  ab-speed     A/B TP1 against TP2 in-process, Llama-3-8B-shaped dummy (speed only)
  ab-speed-served  the same pair through `vllm serve --tensor-parallel-size N` launched
               by abgate
  ab-agree     A/B TP1 against TP2 on real bf16 weights, GSM8K, distribution agreement;
               SmolLM2-135M has 9 attention heads and 3 KV heads, so vLLM cannot split it
               over 2 GPUs: the step says so and uses --agree-model (a model whose head
               counts divide by 2) if given, else stops there
  contract     `abgate run --engine vllm` at TP2 with a contract (tensor_parallel_size 2,
               pipeline_parallel_size 1, NCCL's library mapped by every process, mode
               "every"), then one requiring a library the frontend does not map (it must
               fail, naming the processes); the records' per-process libraries and
               per-GPU cleanup evidence
  contract-served  the passing contract against `vllm serve --tensor-parallel-size 2`
  kill         a served TP2 run: SIGKILL of one worker (VLLM::Worker_TP1), then of
               abgate; after 60 s no VLLM:: process may survive, the port must be free,
               NVML memory of both GPUs back near its pre-run reading; then the same for
               the in-process engine (its workers ended by abgate's watchdog, which says
               so in engine-watchdog.log)
  all          the steps above in order, each in its own process, until --deadline s
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpu_vllm import abgate, sh  # benchmarks/, beside this script

DUMMY_ARGS = ('load_format = "dummy", dtype = "bfloat16", max_model_len = 2048, '
              "gpu_memory_utilization = 0.35")
SERVE_ARGS = ('load-format = "dummy", dtype = "bfloat16", max-model-len = 2048, '
              "gpu-memory-utilization = 0.35, enable-prefix-caching = false")
AGREE_ARGS = 'dtype = "bfloat16", max_model_len = 2048, gpu_memory_utilization = 0.25'
ORDER = ("env", "tests", "ab-speed", "ab-speed-served", "ab-agree", "contract",
         "contract-served", "kill")
MULTICAST = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
LAUNCH = "vllm serve {model} --host {host} --port {port}"


def read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def gpu_used() -> list[dict[str, Any]]:
    from abgate.engines.shared.server_cleanup import gpu_memory

    return gpu_memory().get("devices") or []


# -- env ------------------------------------------------------------------------------


def step_env(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    from abgate.host import gpus

    try:
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True,
                              text=True).stdout
    except OSError as exc:
        topo = f"nvidia-smi: {exc.strerror}"
    figures = {"gpus": gpus(), "topology": topo,
               "multicast_env": {k: os.environ.get(k) for k in MULTICAST}}
    if len(figures["gpus"]) < 2:
        figures["refused"] = f"needs 2 GPUs, NVML sees {len(figures['gpus'])}"
    return figures


# -- A/B experiments ------------------------------------------------------------------


def experiment(name: str, shared: str, arms: str, *, agreement: bool) -> str:
    return f"""name = "{name}"
baseline = "tp1"

[shared]
seeds = [0]
temperature = 0.0
{shared}

[schedule]
mode = "interleave"
warmup = 2

[evidence]
agreement = {str(agreement).lower()}
probes = {str(agreement).lower()}

{arms}
"""


def exp_speed(a: argparse.Namespace) -> str:
    shared = (f'engine = "vllm"\nmodel = "{a.dummy}"\nsuite = "synthetic"\nlimit = 40\n'
              f"max_tokens = 128\nengine_args = {{ {DUMMY_ARGS} }}")
    arms = ('[arms.tp1]\n\n[arms.tp2]\nengine_args = { tensor_parallel_size = 2 }\n'
            'changes = ["tensor_parallel_size", "distributed_executor_backend"]\n')
    return experiment("vllm-tp1-tp2-speed", shared, arms, agreement=False)


def exp_speed_served(a: argparse.Namespace) -> str:
    shared = (f'engine = "openai"\nmodel = "{a.dummy}"\nsuite = "synthetic"\nlimit = 40\n'
              f"max_tokens = 128\nengine_args = {{ {SERVE_ARGS} }}\n\n"
              f'[shared.engine_options]\nlaunch = "{LAUNCH}"\nready_timeout = 600.0')
    arms = ('[arms.tp1]\n\n[arms.tp2]\nengine_args = { tensor-parallel-size = 2 }\n'
            'changes = ["tensor-parallel-size", "tensor_parallel_size"]\n')
    return experiment("vllm-tp1-tp2-speed-served", shared, arms, agreement=False)


def heads_divide(model: str, tp: int) -> str | None:
    """Why ``model`` cannot run at ``tp`` (vLLM needs both head counts divisible), or None."""
    cfg = json.loads((Path(model) / "config.json").read_text())
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    if heads % tp or (kv % tp and tp % kv):
        return f"{model}: {heads} attention heads and {kv} KV heads do not split over {tp} GPUs"
    return None


def exp_agree(a: argparse.Namespace, model: str) -> str:
    shared = (f'engine = "vllm"\nmodel = "{model}"\nsuite = "gsm8k"\n'
              f'data = "{Path(a.data).resolve()}"\nlimit = 50\nmax_tokens = 256\n'
              f"engine_args = {{ {AGREE_ARGS} }}")
    arms = ('[arms.tp1]\n\n[arms.tp2]\nengine_args = { tensor_parallel_size = 2 }\n'
            'changes = ["tensor_parallel_size", "distributed_executor_backend"]\n')
    return experiment("vllm-tp1-tp2-agreement", shared, arms, agreement=True)


def run_ab(text: str, out: Path) -> dict[str, Any]:
    exp = out / "experiment.toml"
    exp.write_text(text)
    gpu_before = gpu_used()
    t0 = time.time()
    rc = abgate("ab", str(exp), "-o", str(out / "ab"), "--force", log=out / "ab.log")
    figures: dict[str, Any] = {"rc": rc, "wall_s": round(time.time() - t0, 1),
                               "gpu_before": gpu_before, "gpu_after": gpu_used()}
    comp = read(out / "ab" / "comparison.json")
    if comp:
        c = comp["comparisons"]["tp2"]
        figures["verdict"] = c["verdict"]["decision"]
        figures["speed"] = c["comparison"].get("speed")
        figures["agreement"] = c["comparison"].get("agreement")
    for arm in ("tp1", "tp2"):
        run = read(out / "ab" / "arms" / arm / "run.json") or {}
        figures[arm] = {"effective": (run.get("engine") or {}).get("effective_config"),
                        "processes": [{k: m.get(k) for k in ("pid", "name", "role", "rank")}
                                      for m in (run.get("provenance") or {}).get("libraries", [])],
                        "cleanup": run.get("cleanup")}
    return figures


def step_agree(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    why = heads_divide(a.model, 2)
    if why and not a.agree_model:
        return {"skipped": why + "; give --agree-model DIR (a bf16 model whose head counts "
                "divide by 2) to measure TP1-vs-TP2 agreement"}
    model = a.agree_model or a.model
    return {"model": model, "smollm2": why, **run_ab(exp_agree(a, model), out)}


# -- contracts ------------------------------------------------------------------------


def mapped_path(basename: str) -> str | None:
    """The real path of a library this (torch-importing) process maps, by basename."""
    import torch  # noqa: F401  (maps libtorch_cuda and NCCL)

    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1]
        if path.startswith("/") and os.path.basename(path).startswith(basename):
            return os.path.realpath(path)
    return None


def contract_file(out: Path, name: str, lib: str, tp: int = 2) -> Path:
    path = out / f"{name}.toml"
    path.write_text(f'name = "{name}"\n[settings]\ntensor_parallel_size = {tp}\n'
                    f'pipeline_parallel_size = 1\n[libraries]\nrequired = ["{lib}"]\n'
                    'mode = "every"\n')
    return path


def run_figures(run_dir: Path) -> dict[str, Any]:
    run = read(run_dir / "run.json") or {}
    prov = run.get("provenance") or {}
    return {"status": run.get("status"), "error": run.get("error"),
            "effective": {k: ((run.get("engine") or {}).get("effective_config") or {}).get(k)
                          for k in ("tensor_parallel_size", "pipeline_parallel_size",
                                    "distributed_executor_backend", "parallel_sizes_from")},
            "multicast_env": {k: (prov.get("environment") or {}).get("env", {}).get(k)
                              for k in MULTICAST},
            "processes": [{k: m.get(k) for k in ("pid", "name", "role", "rank")}
                          | {"libs": len(m.get("libs") or [])}
                          for m in prov.get("libraries") or []],
            "contract": prov.get("contract"), "cleanup": run.get("cleanup")}


def step_contract(a: argparse.Namespace, out: Path, served: bool) -> dict[str, Any]:
    nccl = mapped_path("libnccl.so")
    if nccl is None:
        return {"skipped": "torch maps no libnccl.so here"}
    # the dummy's head counts split over 2 GPUs; random weights: only the checks matter here
    engine = (["--engine", "openai", "--launch", LAUNCH, "--engine-arg", "tensor-parallel-size=2",
               "--engine-arg", "load-format=dummy", "--ready-timeout", "600"] if served else
              ["--engine", "vllm", "--engine-arg", "tensor_parallel_size=2", "--engine-arg",
               "load_format=dummy", "--engine-arg", "gpu_memory_utilization=0.35"])
    engine += ["--model", a.dummy]
    common = ["run", *engine, "--suite", "synthetic", "--limit", "4", "--max-tokens", "16"]
    figures: dict[str, Any] = {"nccl": nccl, "gpu_before": gpu_used()}
    rc = abgate(*common, "--contract", str(contract_file(out, "tp2-nccl-every", nccl)),
                "-o", str(out / "pass"), "--force", log=out / "contract.log")
    figures["pass"] = {"rc": rc, **run_figures(out / "pass")}
    if not served:  # the attention kernels' library: the frontend process never maps it
        fa = mapped_path("_vllm_fa3_C") or str(Path(a.vllm_site) / "vllm" / "_vllm_fa3_C.abi3.so")
        rc = abgate(*common, "--contract", str(contract_file(out, "tp2-fa3-every", fa)),
                    "-o", str(out / "fail"), "--force", log=out / "contract.log")
        figures["fail"] = {"rc": rc, **run_figures(out / "fail")}
    figures["gpu_after"] = gpu_used()
    return figures


# -- kill -----------------------------------------------------------------------------


def _vllm_procs() -> list[dict[str, Any]]:
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            cmd = p.cmdline()
            if cmd and cmd[0].startswith("VLLM::") and p.status() != psutil.STATUS_ZOMBIE:
                found.append({"pid": p.pid, "title": cmd[0].strip(), "ppid": p.ppid()})
        except psutil.Error:
            pass
    return found


def kill_once(a: argparse.Namespace, out: Path, served: bool) -> dict[str, Any]:
    from abgate.engines.shared.server_cleanup import port_is_free

    before, procs_before = gpu_used(), _vllm_procs()
    engine = (["--engine", "openai", "--launch", LAUNCH, "--engine-arg", "tensor-parallel-size=2",
               "--engine-arg", "load-format=dummy", "--ready-timeout", "600"] if served else
              ["--engine", "vllm", "--engine-arg", "tensor_parallel_size=2", "--engine-arg",
               "load_format=dummy", "--engine-arg", "gpu_memory_utilization=0.35"])
    run_dir = out / ("served" if served else "in-process")
    proc = subprocess.Popen([sys.executable, "-m", "abgate", "run", *engine, "--model", a.dummy,
                             "--suite", "synthetic", "--limit", "400", "--max-tokens", "256",
                             "-o", str(run_dir), "--force"],
                            stdout=(out / "kill.log").open("a"), stderr=subprocess.STDOUT)
    deadline = time.time() + 900
    while not ((run_dir / "samples.jsonl").exists() and (run_dir / "samples.jsonl").stat().st_size):
        if proc.poll() is not None or time.time() > deadline:
            return {"error": f"no sample (exit {proc.poll()})"}
        time.sleep(1)
    during = _vllm_procs()
    ports = _ports(during)
    worker = next((p for p in during if p["title"].startswith("VLLM::Worker_TP1")), None)
    if worker:
        os.kill(worker["pid"], signal.SIGKILL)
    proc.kill()
    proc.wait()
    time.sleep(60)
    left = [p for p in _vllm_procs() if p["pid"] not in {q["pid"] for q in procs_before}]
    log = next(iter(run_dir.glob("server-*.log")), None) or run_dir / "engine-watchdog.log"
    log = log if log.exists() else None
    said = [ln for ln in log.read_text().splitlines()
            if ln.startswith("# abgate-supervise:")] if log else []
    return {"gpu_before": before, "gpu_after_60s": gpu_used(), "processes_during": during,
            "killed_worker": worker, "survivors_after_60s": left,
            "ports": {str(p): port_is_free(p) for p in ports}, "supervisor_said": said}


def _ports(procs: list[dict[str, Any]]) -> list[int]:
    import psutil

    found = set()
    for p in procs:
        with contextlib.suppress(psutil.Error):
            found |= {c.laddr.port for c in psutil.Process(p["pid"]).net_connections("tcp")
                      if c.status == psutil.CONN_LISTEN}
    return sorted(found)


# -- driver ---------------------------------------------------------------------------


def step_tests(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    rc = sh([sys.executable, "-m", "pytest", "tests/test_tp_workers.py", "tests/test_vllm_tp.py",
             "tests/test_vllm_engine.py", "-v", "-p", "no:randomly", "-p", "no:cacheprovider"],
            out / "pytest.log", env={"ABGATE_VLLM_MODEL": a.model})
    return {"rc": rc, "summary": (out / "pytest.log").read_text().strip().splitlines()[-1:]}


def run_step(step: str, a: argparse.Namespace, out: Path) -> dict[str, Any]:
    if step == "env":
        return step_env(a, out)
    if step == "tests":
        return step_tests(a, out)
    if step == "ab-speed":
        return run_ab(exp_speed(a), out)
    if step == "ab-speed-served":
        return run_ab(exp_speed_served(a), out)
    if step == "ab-agree":
        return step_agree(a, out)
    if step in ("contract", "contract-served"):
        return step_contract(a, out, served=step.endswith("served"))
    return {"served": kill_once(a, out, True), "in_process": kill_once(a, out, False)}


def step_all(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    t0, done = time.time(), {}
    for step in ORDER:
        if time.time() - t0 > a.deadline:
            done[step] = "skipped: deadline"
            continue
        t = time.time()
        rc = sh([sys.executable, __file__, step, *sys.argv[2:]], out / "all.log")
        done[step] = {"rc": rc, "wall_s": round(time.time() - t, 1)}
        (out / "progress.json").write_text(json.dumps(done, indent=1))
        if step == "env" and rc == 3:
            break
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=(*ORDER, "all"))
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--model", default="/root/m/smol", help="bf16 SmolLM2 (vllm_convert_smol)")
    ap.add_argument("--agree-model", help="ab-agree: a bf16 model whose head counts divide by 2")
    ap.add_argument("--data", required=True, help="GSM8K test.jsonl")
    ap.add_argument("--dummy", default="/root/m/llama3-8b-dummy", help="vllm_dummy_llama3's DIR")
    ap.add_argument("--vllm-site", default="/tmp/site", help="where vLLM is staged")
    ap.add_argument("--deadline", type=float, default=1e9, help="all: seconds")
    a = ap.parse_args()
    out = a.out if a.step == "all" else a.out / a.step
    out.mkdir(parents=True, exist_ok=True)
    figures = step_all(a, out) if a.step == "all" else run_step(a.step, a, out)
    (a.out / f"figures-{a.step}.json").write_text(json.dumps(figures, indent=1, default=str))
    print(json.dumps(figures, indent=1, default=str)[:4000], flush=True)
    if a.step == "env" and figures.get("refused"):
        print(f"gpu_vllm_tp: {figures['refused']}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
