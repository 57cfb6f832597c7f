"""The Hugging Face transformers engine."""
