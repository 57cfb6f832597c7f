"""The OpenAI-compatible HTTP engine (servers abgate launches or is given)."""
