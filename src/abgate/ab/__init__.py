"""Matched A/B experiments: arms, balanced schedules, and verdicts."""

from abgate.ab.experiment import Experiment, load_experiment
from abgate.ab.run import AbOutcome, run_ab
from abgate.ab.workflow import AbResult, run_experiment

__all__ = ["AbOutcome", "AbResult", "Experiment", "load_experiment", "run_ab",
           "run_experiment"]
