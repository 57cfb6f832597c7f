"""The vLLM engine (in-process LLM)."""
