"""The one statement of what may differ between two runs (src/abgate/records/facts.py):
its matcher's rules, its must-match rule, and that the A/B, the drift check, the report
and resume use it rather than lists of their own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from abgate.ab import declared
from abgate.compare import drift
from abgate.records import facts
from abgate.runner import records as rec

SRC = Path(__file__).resolve().parents[2] / "src" / "abgate"
USERS = ["ab/declared.py", "compare/drift.py", "report/contract.py",
         "runner/records.py", "runner/session.py", "ab/runtime_weights.py"]


@pytest.mark.parametrize(("key", "patterns", "expected"), [
    ("engine_args.flash_attn", ["flash_attn"], True),  # a name in any class
    ("effective.flash_attn", ["flash_attn"], True),
    ("env.GGML_NO_FA", ["env.*"], True),
    ("env.GGML_NO_FA", ["env"], True),  # a class covers its keys
    ("host.gpus.0.name", ["host.gpus"], True),  # a key below a pattern
    ("model.sha256", ["model"], True),
    ("effective.host", ["host"], False),  # a class name is no key name elsewhere
    ("engine_args.n_ctx", ["flash_attn", "env.*"], False),
    ("effective.type_k", ["engine_args.type_k"], False),
])
def test_the_one_matcher(key: str, patterns: list[str], expected: bool) -> None:
    assert facts.matches(key, patterns) is expected


def test_must_match_is_everything_but_one_launch_and_volatile_figures() -> None:
    assert facts.must_match("effective.n_ctx") and facts.must_match("library.libggml.so")
    assert not facts.must_match("effective.server_log")  # one launch's
    assert not facts.must_match("effective.endpoints.0")
    assert not facts.must_match("host.gpus.1.memory_used")  # volatile
    assert facts.MUST_MATCH["effective"]["per_launch"] == facts.PER_LAUNCH
    assert set(facts.MUST_MATCH) == set(facts.CLASSES)
    assert all(p.split(".", 1)[0] in facts.CLASSES for p in (*facts.PER_LAUNCH,
                                                             *facts.VOLATILE))


def test_library_means_shared_objects_and_package_python_packages() -> None:
    doc = {"provenance": {"environment": {"packages": {"numpy": "2.4.6"}},
                          "libraries": [{"libs": [{"path": "/x/libggml.so", "sha256": "h"}]}]}}
    conf = drift.configuration(doc)
    assert conf["package.numpy"] == "2.4.6" and conf["library.libggml.so"] == "h"


def test_libraries_of_one_name_are_compared_as_a_set_not_by_import_order() -> None:
    """Two files of one name (pandas' and pyarrow's ``lib.cpython-312-*.so``) mapped in
    either order give one fact; seen on the H200: a baseline and its check differed by
    which of the two was mapped last."""
    def doc(order: list[tuple[str, str]]) -> dict[str, object]:
        libs = [{"path": p, "sha256": h} for p, h in order]
        return {"provenance": {"libraries": [{"pid": 1, "libs": libs}]}}
    pandas, pyarrow = ("/v/pandas/_libs/lib.cpython-312.so", "a" * 64), \
        ("/v/pyarrow/lib.cpython-312.so", "b" * 64)
    one, other = (drift.configuration(doc(o)) for o in ([pandas, pyarrow], [pyarrow, pandas]))
    assert one["library.lib.cpython-312.so"] == "a" * 64 + "," + "b" * 64
    assert one == other
    assert facts.libraries([("/x/libz.so", None), ("/y/libq.so", "q")]) == {"libq.so": "q"}
    assert declared.facts.libraries is facts.libraries


def test_the_users_share_the_one_module() -> None:
    assert declared.matches is facts.matches and drift.matches is facts.matches
    assert declared.differing is facts.differing and rec.iter_diff is facts.iter_diff
    assert drift.volatile is facts.volatile
    own_list = re.compile(r"^(INSTANCE_KEYS|GROUPS|CLASSES|PER_LAUNCH|VOLATILE|ECHO_KEYS|"
                          r"DERIVED_KEYS)\s*=", re.M)
    for name in USERS:
        text = (SRC / name).read_text()
        assert not own_list.search(text), f"{name} states its own list of facts"
        assert "records import facts" in text or "records.facts import" in text, name


def test_a_pattern_of_an_unknown_class_is_refused() -> None:
    assert facts.unknown_class("mapped.libz.so") == "mapped"
    assert facts.unknown_class("library.*") is None and facts.unknown_class("*.x") is None
    with pytest.raises(Exception, match="unknown class 'mapped'"):
        drift.parse_allow("mapped.*")
    with pytest.raises(Exception, match="unknown key group 'mapped'"):
        facts.check_patterns("x.toml: changes", ["mapped.x"])
