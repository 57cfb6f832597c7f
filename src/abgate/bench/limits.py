"""What a bench, a baseline and a baseline check do not certify: stated in their
records and printed with their results, as an A/B report states its own limits."""

from __future__ import annotations

BENCH = (
    "output quality: greedy decoding with EOS ignored measures speed, not whether any "
    "output is right (that is abgate run / abgate ab)",
    "other workloads: only these prompt lengths and this prompt, one request at a time; "
    "other lengths, batch sizes or concurrency can be faster or slower",
    "other hosts or loads: the figures hold for this host at the load recorded beside them "
    "(host_load); they are not a property of the build alone",
    "the roofline: an estimate from the model's weight bytes and a bandwidth figure, not a "
    "measurement of the memory traffic",
)
BASELINE = (
    "other inputs: token identity holds for these cases (prompts, lengths, greedy, EOS "
    "ignored) only; other prompts or sampling settings may diverge",
    "other hosts or thread counts: greedy outputs may legitimately differ on another CPU, "
    "GPU or thread count; record the reference where it is checked",
    "accuracy: matching a reference says the build behaves as the recorded one did on "
    "these cases, not that either is correct",
    "speed between runs: the speed check's interval covers the noise within each run, not "
    "a change of the host's load between record and check",
    "unrecorded configuration: drift is compared over the recorded classes (env snapshot, "
    "engine args, effective config, versions, mapped libraries, model, host); a setting "
    "outside them (a driver or firmware setting, a variable not snapshot) is not compared",
)
