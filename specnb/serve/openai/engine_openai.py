"""An OpenAI-compatible server someone else runs, measured at ``-p endpoint``: SGLang (its counters
are ``sglang:`` gauges, read as the sweep reads them), or any other engine that streams chat
completions. Nothing is launched or probed here; its policy is written per load range, since no
such engine is known to change k with the batch size."""

from __future__ import annotations

from specnb.serve.engines import EngineDefaults, register
from specnb.serve.speculation import Launch, range_text


class OpenAIEngine(EngineDefaults):
    """SGLang, or another OpenAI-compatible engine, met at an endpoint only."""

    name = "sglang"
    label = "SGLang"
    metrics_prefix = "sglang"
    batch_gauge = "num_running_reqs"

    def policy_lines(self, launch: Launch, configs: list) -> list[str]:
        """One line per load range naming the configuration to run there (spec-off where k = 0)."""
        lines = []
        for i, (start, end, k) in enumerate(launch.ranges):
            what = "spec-off" if k == 0 else launch.by_k.get(k, f"k = {k}")
            lines.append(f"{range_text(start, end, i == len(launch.ranges) - 1)} concurrent: {what}")
        return lines


ENGINE = register(OpenAIEngine())
