"""Measurement: the prompt set, interleaved verifier-only vs speculative runs as raw records and
their summaries, per-position acceptance, forward-pass microbenchmarks, the notebooks' derived
tables, and side-by-side runs against Hugging Face ``generate``."""
