"""The llama.cpp engine (llama-cpp-python, in-process)."""
