"""What several engines use: launched servers and their cleanup, process supervision,
log-prob helpers, the embedded default model."""
