"""A real engine library's repository for in-process revision A/Bs: llama-cpp-python's
Python layer (the installed package's own source files) in a git repository, with a
base commit and two changes of it: a no-op (a comment) and a planted vocabulary-offset
bug (``Llama.eval`` feeds every token ID off by one: the prompt abgate rendered, and
checked to match between the arms, is not what the model sees).

Each revision builds into a venv of its own with ``pip install .``; the compiled
llama.cpp libraries are copied in from the installed package as the build's last step
(compiling llama.cpp per revision takes minutes on CI's two cores, and the commits
change only the Python layer). The arms then run abgate's in-process llama.cpp engine
in the revision's interpreter (``engine_options.python``), importing that revision's
``llama_cpp``."""

from __future__ import annotations

import shutil
import sys
import sysconfig
from pathlib import Path

from tests.support.engine_repo import git

_SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"

PYPROJECT = '''[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "llama_cpp_python"
version = "0.0.0+fork"

[tool.setuptools.packages.find]
include = ["llama_cpp*"]
'''

# where each arm's engine runs: the revision's own interpreter
PYTHON = "{build}/venv/bin/python"


def installed() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).resolve().parent


def build_command() -> str:
    """venv (reusing this venv's pure-Python packages through a .pth, nothing fetched),
    the revision's package installed into it, then the compiled libraries."""
    return ("{python} -m venv --without-pip {venv} && "
            f"echo {sysconfig.get_paths()['purelib']} > {{venv}}/{_SITE}/_abgate_base.pth && "
            "{python} -m pip --python {venv}/bin/python install -q --no-deps "
            "--no-build-isolation --no-index . && "
            f"cp -r {installed() / 'lib'} {{venv}}/{_SITE}/llama_cpp/lib")


def _edit(repo: Path, name: str, old: str, new: str, message: str) -> str:
    path = repo / "llama_cpp" / name
    text = path.read_text()
    assert text.count(old) == 1, f"{name}: the fixture's anchor is not unique"
    path.write_text(text.replace(old, new))
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "HEAD")


def make_library_repo(repo: Path) -> dict[str, str]:
    """The repository and its revisions by name: base, noop, regression."""
    shutil.copytree(installed(), repo / "llama_cpp",
                    ignore=shutil.ignore_patterns("__pycache__", "lib", "*.so*"))
    (repo / "pyproject.toml").write_text(PYPROJECT)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    revs = {"base": git(repo, "rev-parse", "HEAD")}
    revs["noop"] = _edit(repo, "__init__.py", "from .llama_cpp import *",
                         "# the fork's bindings\nfrom .llama_cpp import *", "noop")
    git(repo, "checkout", "-q", "-b", "regression", revs["base"])
    revs["regression"] = _edit(
        repo, "llama.py", "            n_tokens = len(batch)\n",
        "            batch = [(t + 1) % self._n_vocab for t in batch]  # the offset bug\n"
        "            n_tokens = len(batch)\n",
        "eval: token IDs off by one (a vocabulary-offset bug)")
    git(repo, "checkout", "-q", "main")
    return revs
