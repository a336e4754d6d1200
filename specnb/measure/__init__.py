"""Measurement: the prompt set, interleaved verifier-only vs speculative runs as raw records and
their summaries, per-position acceptance, forward-pass microbenchmarks, the notebooks' derived
tables, and side-by-side runs against Hugging Face ``generate``; under serving load, the load on one
server and what is read off it (``serving_load``) and the sweep over levels and configurations
(``serving_sweep``)."""
