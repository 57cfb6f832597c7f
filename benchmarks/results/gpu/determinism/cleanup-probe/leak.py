from pathlib import Path

import torch
from tests.test_engine_transformers import build_tiny_model, req

from abgate.engines.transformers import engine as hf

torch.cuda.memory._record_memory_history(max_entries=100000)
d = build_tiny_model(Path("/tmp/tinyleak"))
for det in (False, True, False):
    e = hf.load(str(d), {"device": "cuda", "deterministic": det})
    before = torch.cuda.memory_allocated()
    e.generate([req(max_tokens=8, ignore_eos=True)])
    mid = torch.cuda.memory_allocated()
    r = e.generate([req(max_tokens=8, ignore_eos=True)])[0]
    e.score(r.prompt_token_ids, r.output_token_ids)
    e.close()
    ev = e.cleanup_evidence
    print(
        "det",
        det,
        "verified",
        ev["verified"],
        ev["torch_allocated_before_bytes"],
        ev["torch_allocated_bytes"],
        "after-gen",
        mid - before,
        flush=True,
    )
    snap = torch.cuda.memory._snapshot()
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and b["size"] < 4096:
                fr = [
                    f"{f['filename'].split('site-packages/')[-1]}:{f['line']}:{f['name']}"
                    for f in b.get("frames", [])
                ]
                fr = [x for x in fr if "torch/" not in x[:6] or "nn/" in x][:14]
                print("  live block", b["size"], fr, flush=True)
