"""The simulated engine the tests and method checks run on: a continuous-batching scheduler with a
stated cost model (``sim_engine``, ``simulated_cost``) behind an OpenAI-style HTTP server
(``simulated_http``), registered as an engine (``engine_simulated``)."""
