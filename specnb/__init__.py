"""specnb: will speculative decoding make *your* verifier/draft pair faster on *your* hardware?

Layers (imports only go downwards):
    errors, flops, theory        model math, no weights
    models, timing               loading pairs, per-stage timers
    decoding                     KV-cached verifier-only and speculative loops
    bench, predict               measurements and the calibrated cost model
    plots, widgets, runner       notebooks' charts and papermill execution
    cli, cli_commands            the ``specnb`` command
"""

__version__ = "0.1.0"
