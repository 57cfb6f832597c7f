"""The runner: owns timing, records and resume."""

from abgate.runner.execute import RunOutcome, execute
from abgate.runner.spec import PreparedRun, RunConfig, prepare

__all__ = ["PreparedRun", "RunConfig", "RunOutcome", "execute", "prepare"]
