"""Matched A/B experiments: arms, balanced schedules, and verdicts."""

from abgate.ab.experiment import Experiment, load_experiment
from abgate.ab.run import AbOutcome, run_ab

__all__ = ["AbOutcome", "Experiment", "load_experiment", "run_ab"]
