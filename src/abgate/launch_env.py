"""The environment this process started with, before a library abgate imports changed it.

Some libraries edit ``os.environ`` when imported: OpenCV's ``cv2`` (which vLLM's
argument checks import) prepends its ``lib64`` to ``LD_LIBRARY_PATH``, vLLM sets
``VLLM_WORKER_MULTIPROC_METHOD``. A local Ray cluster that abgate starts after checking
an engine's arguments would hand those edits to every replica, so that a replica's
environment depended on what the command checked before it (seen on the H200: a baseline
recorded with ``--cluster`` and its check differed in ``LD_LIBRARY_PATH`` by one cv2
entry). :func:`as_launched` restores the launch environment for a block (the start of
such a cluster). Snapshot taken when ``abgate`` is first imported (``abgate/__init__``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

LAUNCH_ENV: dict[str, str] = dict(os.environ)


@contextmanager
def as_launched() -> Iterator[None]:
    """``os.environ`` as at launch inside the block, as it was again after it."""
    now = dict(os.environ)
    changed = {k for k in now.keys() | LAUNCH_ENV.keys() if now.get(k) != LAUNCH_ENV.get(k)}
    try:
        for k in changed:
            if k in LAUNCH_ENV:
                os.environ[k] = LAUNCH_ENV[k]
            else:
                del os.environ[k]
        yield
    finally:
        for k in changed:
            if k in now:
                os.environ[k] = now[k]
            else:
                os.environ.pop(k, None)
