"""The results ledger: an embedded SQLite index of every run, A/B, bench and baseline
directory (and of imported lm-evaluation-harness and ``vllm bench serve`` results),
with history over commits and any-two-runs comparison. See ``docs/ledger.md``.

- :mod:`abgate.ledger.paths`: where the ledger file is (``--ledger``, ``ABGATE_LEDGER``,
  the user's data directory);
- :mod:`abgate.ledger.store`: the SQLite schema and queries;
- :mod:`abgate.ledger.entries` / :mod:`abgate.ledger.index`: what is recorded about a
  directory, adding, re-adding and checking;
- :mod:`abgate.ledger.history`: a metric over time with step changes flagged;
- :mod:`abgate.ledger.compare`: two recorded runs or arms through ``abgate ab``'s own
  statistics and policy;
- :mod:`abgate.ledger.imports`: lm-eval ``--log_samples`` files and vLLM bench results.
"""
