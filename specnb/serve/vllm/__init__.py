"""vLLM: its configurations and ``--speculative-config`` (``engine_vllm``), its process
(``vllm_server``) and its install check (``vllm_setup``)."""
