"""llama.cpp's ``llama-server``: its configurations and policy lines (``engine_llama``) and its
process (``llama_server``)."""
