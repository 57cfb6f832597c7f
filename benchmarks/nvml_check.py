"""Exercise abgate's NVML paths (host GPUs, per-process GPU memory, cleanup check)
against a real NVIDIA GPU: run from the repo root on a GPU machine with torch:
    python benchmarks/nvml_check.py
"""
import json
import subprocess
import sys

sys.path.insert(0, "src")
from abgate.bench.resources import gpu_memory as process_gpu  # noqa: E402
from abgate.engines.shared.server_cleanup import gpu_memory, gpu_returned  # noqa: E402
from abgate.host import gpus  # noqa: E402

out = {"gpus": gpus()}
before = gpu_memory()
out["before"] = before
alloc = ("import torch, time; x = torch.empty(2 * 1024**3, dtype=torch.uint8, device='cuda');"
         " torch.cuda.synchronize(); print('ok', flush=True); time.sleep(120)")
p = subprocess.Popen([sys.executable, "-c", alloc], stdout=subprocess.PIPE, text=True)
out["child_said"] = p.stdout.readline().strip()
out["during"] = gpu_memory()
out["process_gpu"] = process_gpu(p.pid)
out["returned_while_alive"] = gpu_returned(before, wait_s=2)
p.kill()
p.wait()
out["returned_after_kill"] = gpu_returned(before, wait_s=30)
print(json.dumps(out, indent=1))
