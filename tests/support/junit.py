"""A JUnit XML file as CI services read it: parsed by junitparser (a JUnit XML parser, in the
dev extra), each testcase's outcome and message, with the suite's counts checked against
its cases."""

from __future__ import annotations

from pathlib import Path

from junitparser import JUnitXml, TestSuite


def junit_cases(path: Path) -> dict[str, tuple[str, str]]:
    """testcase name -> (outcome, message): outcome "pass", "failure", "skipped" or
    "error"."""
    xml = JUnitXml.fromfile(str(path))
    suites = [xml] if isinstance(xml, TestSuite) else list(xml)
    out: dict[str, tuple[str, str]] = {}
    for suite in suites:
        cases = list(suite)
        assert suite.tests == len(cases), (suite.tests, len(cases))
        for case in cases:
            res = case.result[0] if case.result else None
            out[case.name] = (type(res).__name__.lower() if res else "pass",
                              (res.message or "") if res else "")
        assert suite.failures == sum(r == "failure" for r, _ in
                                     (out[c.name] for c in cases))
    return out
