"""Serving engines under load: what a configuration drafts (``speculation``), what an engine is and
the one table of them (``engines``), one sub-folder per engine (``llama/``, ``vllm/``,
``simulated/``, ``openai/``), the processes they run in (``server_process``, ``servers``) and the
reaping of any a crash left behind (``reaper``). CONTRIBUTING.md shows how to add an engine."""
