"""Native code built for this machine and run where its crash cannot take a kernel down: llama.cpp
built for this CPU (``llama_build``), run in a child process (``isolation``, ``llama_cpp``), vLLM's
install in an environment of its own (``vllm_build``), an EAGLE-3 head exported to the serving
engines' formats (``head_export``). Nothing here knows the decoding loop or a serving engine."""
