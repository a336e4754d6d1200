"""Serving engines under load, one module per concept: what an engine is, what a configuration drafts
and the one table of engines (``engines``), the processes they run in and the reaping of any a crash
left behind (``processes``), and one module per launched engine (``llama``, ``vllm``, ``simulated``).
CONTRIBUTING.md shows how to add an engine."""
