"""Matched A/B experiments: arms, balanced schedules, and verdicts."""

from abgate.ab.experiment import Experiment, load_experiment
from abgate.ab.workflow import AbOutcome, AbResult, run_ab, run_experiment

__all__ = ["AbOutcome", "AbResult", "Experiment", "load_experiment", "run_ab",
           "run_experiment"]
