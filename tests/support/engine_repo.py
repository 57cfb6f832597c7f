"""A real engine repository for revision A/Bs: a small git repository holding a Python
engine package on llama-cpp-python, with a base commit and three changes of it: a
no-op (a comment), a planted sampling regression (repeat_penalty 0.5: degenerate
repetition) and a planted slowdown (30 ms per decoded token: several times a decode step
of SmolLM2 on one thread)."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

ENGINE = '''"""tinyengine: an OpenAI-compatible server on llama-cpp-python, with the
prompt handling and the decode step an engine team owns. Run: python -m tinyengine
--model M --port P (llama_cpp.server's flags)."""
import runpy
import sys
import time

import llama_cpp

SLEEP_S = 0.0  # per decoded token


def format_prompt(prompt: str) -> str:
    return prompt


def sampling(kwargs: dict) -> dict:
    return kwargs


def patch() -> None:
    complete, evaluate = llama_cpp.Llama.create_completion, llama_cpp.Llama.eval

    def create_completion(self, prompt, *args, **kwargs):
        if isinstance(prompt, str):
            prompt = format_prompt(prompt)
        return complete(self, prompt, *args, **sampling(kwargs))

    def eval(self, tokens):
        if SLEEP_S:
            time.sleep(SLEEP_S)
        return evaluate(self, tokens)

    llama_cpp.Llama.create_completion = create_completion
    llama_cpp.Llama.eval = eval


if __name__ == "__main__":
    patch()
    sys.argv[0] = "tinyengine"
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
'''

PYPROJECT = '''[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "tinyengine"
version = "0.1"

[tool.setuptools]
py-modules = ["tinyengine"]
'''

# The per-revision venv reuses the installed llama-cpp-python (a .pth to this venv's
# site-packages): nothing is downloaded or rebuilt.
BUILD = ("{python} -m venv --without-pip {venv} && "
         "echo " + sysconfig.get_paths()["purelib"] + " > "
         "{venv}/lib/python3.11/site-packages/_abgate_base.pth && "
         "{python} -m pip --python {venv}/bin/python install -q --no-deps "
         "--no-build-isolation --no-index .")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, text=True,
                          capture_output=True).stdout.strip()


def commit(repo: Path, text: str, message: str) -> str:
    (repo / "tinyengine.py").write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_engine_repo(repo: Path) -> dict[str, str]:
    """The repository and its revisions by name: base, noop, regression, slowdown."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    revs = {"base": commit(repo, ENGINE, "base")}
    revs["noop"] = commit(repo, "# formatting owned by the engine team\n" + ENGINE, "noop")
    git(repo, "checkout", "-q", "-b", "regression", revs["base"])
    # a sampling bug: a repetition penalty below 1 rewards repeats (degenerate loops)
    revs["regression"] = commit(repo, ENGINE.replace(
        "    return kwargs\n", '    return {**kwargs, "repeat_penalty": 0.5}\n'),
        "sampling bug: repeat_penalty 0.5")
    git(repo, "checkout", "-q", "-b", "slowdown", revs["base"])
    revs["slowdown"] = commit(repo, ENGINE.replace("SLEEP_S = 0.0 ", "SLEEP_S = 0.03 "),
                              "slowdown")
    git(repo, "checkout", "-q", "main")
    return revs

# How an arm runs its revision's build: the revision's interpreter serves the engine.
LAUNCH = ("{build}/venv/bin/python -m tinyengine --model {model} --host {host} "
          "--port {port} --chat_format chat_template.default --logits_all false "
          "--use_mlock false --verbose false")
