from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.scheduling import scope, scope_costs, shares_a_module_fixture, starts_ray

REPO = Path(__file__).resolve().parents[1]
GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"

# llama.cpp's greedy tokens depend on the CPU's SIMD paths and on the thread count (the
# order of its reductions), so a test of a real engine may only assert what holds on any
# x86-64 host: decisions, relations, and determinism *within* a host at one thread count.
# ABGATE_TEST_THREADS=N pins every engine the tests start to N threads, so that the same
# suite can be run at 1 and at 2 threads to show it does not depend on either.
THREADS_ENV = "ABGATE_TEST_THREADS"
# How long a test waits for a real engine before calling it a hang. Only a hang guard:
# how fast llama.cpp runs is the host's business (two spin-waiting threads on a busy
# 2-core machine were 10x slower than one on an idle one), so no test bounds it closer.
HANG_S = 1200.0

# Every command a test runs (in-process or as a subprocess) indexes into a throwaway
# ledger, never the user's data directory; tests of the ledger pass their own --ledger.
os.environ["ABGATE_LEDGER"] = str(Path(tempfile.mkdtemp(prefix="abgate-test-ledger-"))
                                  / "ledger.sqlite")


def _beside_other_workers() -> bool:
    """True in a pytest-xdist worker with others beside it (``-n auto`` on more than one
    core, the README's command): the engine tier then shares the host with the fast tier.
    At the engine's default thread count (every core), llama.cpp's spin-waiting threads
    and the fast tier's worker slowed each other several times over (2026-12-03, 2 cores:
    the README chain 39 s -> 164 s, the four-arm agreement A/B 40 s -> 162 s)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1) > 1


def requested_threads(default: int | None = None) -> int | None:
    """The thread count for engines started by tests: ``ABGATE_TEST_THREADS`` when set,
    else ``default``; None: the engine's own default, all the cores it may use, except
    beside other xdist workers (:func:`_beside_other_workers`), where it is 1. (The
    engines' default thread count: ``python -m pytest -m engine -n 0``.)"""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return 1 if default is None and _beside_other_workers() else default
    if not raw.isdigit() or int(raw) < 1:
        raise pytest.UsageError(f"{THREADS_ENV} must be a positive integer, got {raw!r}")
    return int(raw)


# torch (the transformers engine, in a test's process or in the abgate it starts) and the
# BLAS under numpy take their thread count from OMP_NUM_THREADS when they start: set here,
# before any test module imports torch, so that they too run on the tests' thread count.
# At torch's default (every core) beside another xdist worker, its waiting threads spun:
# the SmolLM2 GGUF run on transformers took 34.8 s of CPU for 15 s alone (2026-12-06).
if requested_threads() is not None:
    os.environ.setdefault("OMP_NUM_THREADS", str(requested_threads()))


def engine_threads(default: int | None = None) -> dict[str, int]:
    """The llama.cpp engine args that pin generation and prompt threads (the one place
    tests read ``ABGATE_TEST_THREADS``); empty when neither it nor ``default`` is set.
    The same args become ``--n_threads N --n_threads_batch N`` on a launched server."""
    n = requested_threads(default)
    return {} if n is None else {"n_threads": n, "n_threads_batch": n}


def thread_flags(default: int | None = None) -> list[str]:
    """:func:`engine_threads` as ``--engine-arg KEY=VALUE`` flags for the CLI."""
    return [flag for key, value in engine_threads(default).items()
            for flag in ("--engine-arg", f"{key}={value}")]


def toml_engine_args(args: dict[str, object], default_threads: int | None = None) -> str:
    """An inline TOML table of engine args with :func:`engine_threads` merged in, for the
    ``engine_args = {...}`` line of an experiment file."""
    merged = {**args, **engine_threads(default_threads)}
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in merged.items()) + " }"


# ``pytestmark = pytest.mark.engine`` or a list on that line holding it
# (``pytestmark = [pytest.mark.engine, pytest.mark.extras]``)
_ENGINE_MODULE = re.compile(r"^pytestmark = (?:\[[^\]\n]*?)?\bpytest\.mark\.engine\b.*$",
                            re.MULTILINE)
_MARK = re.compile(r"\bpytest\.mark\.(\w+)")
_EXPR_NAME = re.compile(r"\b(?!(?:and|or|not)\b)[A-Za-z_]\w*\b")


def can_select(expr: str, module_marks: set[str]) -> bool:
    """Whether ``-m expr`` can select a test of a module whose every test carries
    ``module_marks`` (a test may add marks of its own: every combination of the names
    ``expr`` asks about is tried)."""
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expr)
    free = sorted(set(_EXPR_NAME.findall(expr)) - module_marks)
    for bits in range(1 << len(free)):
        marks = module_marks | {n for i, n in enumerate(free) if bits >> i & 1}
        if compiled.evaluate(lambda name, marks=marks, **kwargs: name in marks):
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A test module marked ``engine`` as a whole (``pytestmark = pytest.mark.engine``,
    or a list holding it) is not even imported when ``-m`` can select none of its tests
    (the fast tier, ``-m "not engine"``): importing one costs the tier its imports
    (torch and transformers, 1.5 s of CPU) and selects nothing. (Its tests are then not
    counted as deselected.) ``-m extras`` still imports a module marked
    ``[pytest.mark.engine, pytest.mark.extras]`` (from 2026-12-04 to 12-06 it did not, and
    CI's extras tier ran 25 of its 41 tests: tests/fast/test_xdist_groups.py)."""
    expr = config.getoption("markexpr")
    if not expr or collection_path.suffix != ".py" or not collection_path.name.startswith(
            "test_"):
        return None
    try:
        line = _ENGINE_MODULE.search(collection_path.read_text())
    except OSError:
        return None
    if line is None:
        return None
    return None if can_select(expr, set(_MARK.findall(line.group(0)))) else True


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: xdist's own count (a worker a core, or ``PYTEST_XDIST_AUTO_NUM_WORKERS``),
    doubled when ``-m`` can select no engine test (the fast tier, ``-m "not engine"``). Its
    tests spend much of their time waiting on the processes they start (abgate
    subprocesses, servers, signals), so one worker a core left the cores idle: on 2 cores
    (2026-12-06) the tier took 147 to 154 s with 2 workers, 135 s with 3 and 111 to 123 s
    with 4, for the same CPU time. An engine test keeps a core to itself (its tokens and
    speed are the host's, :func:`requested_threads`). None: xdist's count as it is."""
    expr = config.getoption("markexpr")
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or not expr or can_select(
            expr, {"engine"}):
        return None
    from xdist.plugin import pytest_xdist_auto_num_workers as xdist_count

    return 2 * xdist_count(config)


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outside pytest-randomly's shuffle
def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> Iterator[None]:
    """Under pytest-xdist (``-n``, with ``--dist loadgroup`` as pyproject.toml sets), every
    test goes to whichever worker is free, the engine tier's as the fast tier's, except:
    the tests of a module that start a real Ray cluster run on one worker, one after
    another (two local clusters of several raylets at once would share 2 cores between
    a dozen processes); a module whose tests share a fixture of module scope runs on one
    worker, so that the fixture (often a whole run) is built once, not once per worker.
    An engine beside other workers runs on one thread (:func:`requested_threads`), so two
    engine tests at once each have a core of a 2-core host, as an engine test and a
    fast-tier test had when the engine tier ran on one worker (until 2026-12-06: the
    README's command then waited minutes on that worker after the other had finished).
    The Ray tests go first (after any shuffle, their own order kept): one worker's chain of
    clusters starting, serving and stopping, much of it waiting, then overlaps the other
    tests from the start instead of ending the run alone. Then the costliest scopes (a
    group's ``cost`` marks summed: tests/support/scheduling.py), longest first, so that
    the run ends on short tests (the 63 s revision A/B had started two thirds of the way
    in, and one worker finished it alone). pyproject.toml's ``--no-loadscope-reorder``
    keeps xdist from re-sorting the scopes by their number of tests."""
    for item in items:
        if starts_ray(item):
            item.add_marker(pytest.mark.xdist_group("ray"))
        elif shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    yield  # the other hooks (pytest-randomly's shuffle, -m's deselection) run here
    cost = scope_costs(items)
    items.sort(key=lambda item: (not starts_ray(item), -cost[scope(item)]))  # stable


def pytest_report_header(config: pytest.Config) -> str:
    n = os.environ.get(THREADS_ENV, "").strip()
    unset = ("unset (engines use their default thread count; 1 in an xdist worker beside "
             "others)")
    return f"{THREADS_ENV}: {n or unset}"


@pytest.fixture(scope="session")
def gsm8k_path() -> Path:
    if not GSM8K.exists():
        pytest.skip(f"GSM8K test set not found at {GSM8K}")
    return GSM8K


@pytest.fixture(scope="session")
def model_path() -> str:
    from abgate.engines.llamacpp.engine import default_model_path

    return str(default_model_path())


@pytest.fixture
def small_bandwidth_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bench in this process probes the CPU's memory bandwidth on 16 MiB once, not on
    512 MiB six times (2-3 s of page faults and sums): the same probe, the same fields
    in the record, for tests that check the record and not this host's bandwidth."""
    from abgate.bench import session

    probe = session.measure_peak_bandwidth

    def small(size_mib: int = 512, repeats: int = 5,
              threads: int | None = None) -> dict[str, Any]:
        return probe(16, 1, threads)

    monkeypatch.setattr(session, "measure_peak_bandwidth", small)


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``openai`` engine in this process retries without the exponential back-off
    between attempts (0.5 s, then 1 s), for tests that check how many attempts are made
    (the back-off itself: test_fault_server.py)."""
    from abgate.engines.openai import engine as openai_compat

    monkeypatch.setattr(openai_compat, "_backoff", lambda attempt, retry_after: 0.0)


@pytest.fixture(scope="session")
def smollm2_self_diff(model_path: str) -> dict[str, object]:
    """``diff_checkpoints`` of the embedded model against itself (every tensor, a few
    seconds), computed once for the tests that check it and render it; read, never
    changed, by them."""
    pytest.importorskip("gguf", reason="the 'weights' extra is not installed")
    from abgate.weights import diff_checkpoints

    return diff_checkpoints(Path(model_path), Path(model_path))


def abgate(*args: str, timeout: float = HANG_S, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (as a user would)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "abgate", *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, cwd=cwd)


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test sends SIGINT: started from a background job
    (``cmd &`` in a script), a child inherits SIGINT ignored, which abgate keeps (as it
    should), and the test would wait for a Ctrl-C that never lands."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_until(done: Callable[[], bool], proc: subprocess.Popen[str] | subprocess.Popen[bytes],
               what: str) -> None:
    """Poll until ``done()``, failing if ``proc`` exits first; HANG_S is only a hang guard,
    so a slow host waits longer instead of a test acting on a half-reached state."""
    deadline = time.monotonic() + HANG_S
    while not done():
        assert proc.poll() is None, f"exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {HANG_S:.0f} s"
        time.sleep(0.05)


def no_engine_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment in which importing ``llama_cpp`` fails and leaves a marker file: a
    command run with it that still gives its own error never got as far as loading an
    engine (the behaviour "fails fast", without a wall-clock bound tied to one host)."""
    poison = tmp_path / "poison"
    (poison / "llama_cpp").mkdir(parents=True)
    marker = tmp_path / "llama_cpp_imported"
    (poison / "llama_cpp" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "raise ImportError('llama_cpp was imported although the input was bad')\n")
    path = os.pathsep.join(p for p in (str(poison), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}, marker


class _RefusedLlamaCpp(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``llama_cpp`` and its submodules, and fails to load them as the poisoned
    package of :func:`no_engine_env` does, noting each attempt."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def find_spec(self, name: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != "llama_cpp" and not name.startswith("llama_cpp."):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def exec_module(self, module: types.ModuleType) -> None:
        self.attempts.append(module.__name__)
        raise ImportError("llama_cpp was imported although the input was bad")


@contextlib.contextmanager
def engine_refused() -> Iterator[list[str]]:
    """:func:`no_engine_env` for commands run in this process (``tests.support.fake.cli``):
    inside, importing ``llama_cpp`` fails (a copy already imported is set aside) and so
    does constructing the llama.cpp engine; the list yielded names each attempt. Empty
    at the end: the commands never got as far as loading an engine."""
    from abgate.engines.llamacpp import engine as llamacpp

    refuse = _RefusedLlamaCpp()

    def load(*args: object, **kwargs: object) -> None:
        refuse.attempts.append("abgate.engines.llamacpp.engine.LlamaCppEngine")
        raise ImportError("llama_cpp was imported although the input was bad")

    aside = {n: m for n, m in sys.modules.items()
             if n == "llama_cpp" or n.startswith("llama_cpp.")}
    init = llamacpp.LlamaCppEngine.__init__
    for name in aside:
        del sys.modules[name]
    sys.meta_path.insert(0, refuse)
    llamacpp.LlamaCppEngine.__init__ = load  # type: ignore[method-assign,assignment]
    try:
        yield refuse.attempts
    finally:
        llamacpp.LlamaCppEngine.__init__ = init  # type: ignore[method-assign]
        sys.meta_path.remove(refuse)
        sys.modules.update(aside)


def llama_server_binary() -> Path | None:
    """llama.cpp's ``llama-server`` as ``tests/tools/build_llama_server.sh`` caches it
    (built from the llama.cpp the installed llama-cpp-python vendors), or
    ``ABGATE_LLAMA_SERVER``; None where it is not built."""
    given = os.environ.get("ABGATE_LLAMA_SERVER")
    if given:
        return Path(given) if Path(given).is_file() else None
    try:
        import llama_cpp
    except ImportError:
        return None
    cache = Path(os.environ.get("ABGATE_CACHE") or Path.home() / ".cache" / "abgate")
    path = cache / "llama-server" / llama_cpp.__version__ / "bin" / "llama-server"
    return path if path.is_file() else None


needs_llama_server = pytest.mark.skipif(
    llama_server_binary() is None,
    reason="llama.cpp's llama-server is not built (run tests/tools/build_llama_server.sh; "
           ".ci/run does)")


def llama_server_launch() -> str:
    """``--launch`` for the built llama-server (``{model}`` filled by abgate)."""
    return f"{llama_server_binary()} -m {{model}} --host {{host}} --port {{port}}"


def llama_server_args() -> str:
    """llama-server flags as an inline TOML table: one slot, the tests' thread count."""
    n = requested_threads(1)
    return (f'{{ ctx-size = 2048, threads = {n}, threads-batch = {n}, parallel = 1, '
            f'no-webui = true }}')


@pytest.fixture(autouse=True)
def _fast_tier_loads_no_real_engine(request: pytest.FixtureRequest,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked ``engine`` (the fast tier) that loads llama.cpp or transformers
    in this process fails, naming the marker; workflow logic there runs on the fake
    engine. (A real engine a test starts in a subprocess is caught by its time instead:
    ``--durations``.)"""
    if request.node.get_closest_marker("engine") is not None:
        return
    from abgate.engines.llamacpp import engine as llamacpp
    from abgate.engines.transformers import engine as transformers

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("this test loads a real engine: mark it @pytest.mark.engine, "
                             "or run its logic on the fake engine (--engine fake)")

    monkeypatch.setattr(llamacpp.LlamaCppEngine, "__init__", refuse)
    monkeypatch.setattr(transformers.TransformersEngine, "__init__", refuse)


_PROGRESS = re.compile(r"^abgate: (?!error:)[^:]*: \d+/\d+\b")


def error_lines(stderr: str) -> list[str]:
    """stderr without the progress lines a command prints when stderr is not a terminal
    (``abgate: run R: 3/8 (38%), ...``): what a one-line-error test counts."""
    return [line for line in stderr.strip().splitlines() if not _PROGRESS.match(line)]
