"""Every chart the package draws, built from frames shaped like a run's tables and read back from its
Vega-Lite spec (``specnb.app.charts.lint``): no two series of one panel share a colour, no row lands
on another's mark, no legend label is cut. A new chart function needs a builder here (a test says so);
the smoke runs in tests/notebooks lint the charts the notebooks really draw."""

import inspect
import json

import pandas as pd
import pytest
from fixtures import chart_frames as frames

from specnb.app import widgets
from specnb.app.charts import engine_options, expected, lint, load_curves, measured, predicted

MODULES = (expected, measured, predicted, engine_options, load_curves)


def methods() -> pd.DataFrame:
    rows = [("verifier-only · PyTorch eager · fp32", "PyTorch eager", "fp32", "", 1.0),
            ("smollm2-draft-xs γ=1 · PyTorch eager · fp32", "PyTorch eager", "fp32", "smollm2-draft-xs γ=1", 1.07),
            ("verifier-only · llama.cpp · q4_1", "llama.cpp", "q4_1", "", 2.5)]
    return pd.DataFrame([{"method": m, "engine": e, "precision": p, "speculation": s, "speedup": x,
                          "speedup_lo": x * 0.95, "speedup_hi": x * 1.05, "tok_s": 5 * x, "identical_prompts": 2,
                          "prompts": 2, "prefix_share": 1.0} for m, e, p, s, x in rows])


def tax() -> tuple[pd.DataFrame, pd.DataFrame]:
    engines = ["PyTorch eager · fp32", "PyTorch eager · int8"]
    grid = pd.DataFrame([{"model": e, "n_tokens": n, "batch_size": 1, "median_ms": 100 / (i + 1) + n}
                         for i, e in enumerate(engines) for n in (1, 2, 4)])
    fits = pd.DataFrame([{"engine": e, "t0_ms": 100 / (i + 1), "ms_per_token": 1.0, "floor_ms": 20.0}
                         for i, e in enumerate(engines)])
    return grid, fits


def serving() -> pd.DataFrame:
    """A closed-loop serving summary: spec-off and two configurations at three concurrencies."""
    rows = []
    for config in ("spec-off", "ngram:4", "eagle3:3"):
        for c in (1, 2, 4):
            drafts = 0 if config == "spec-off" else 100 * c
            rows.append({"config": config, "load": "closed", "concurrency": c, "mean_batch": c,
                         "output_throughput": 10.0 * c, "median_tpot_ms": 20.0 + c, "p90_tpot_ms": 30.0 + c,
                         "median_itl_ms": 20.0, "alpha": 0.5, "tau": 2.0, "partial": False,
                         "speedup_tpot": None if config == "spec-off" else 1.1 + 0.1 * c,
                         "speedup_tpot_lo": 1.0, "speedup_tpot_hi": 1.5,
                         "speedup_output_throughput": None if config == "spec-off" else 1.2,
                         "speedup_output_throughput_lo": 1.1, "speedup_output_throughput_hi": 1.3,
                         "predicted_speedup_tpot": 1.2, "spec_decode_num_drafts": drafts,
                         "per_position": json.dumps([0.6, 0.4, 0.2])})
    return pd.DataFrame(rows)


SUMMARY = frames.summary()
SPEC = SUMMARY[SUMMARY["gamma"] > 0]
BUILDERS = {
    "expected.speedup_heatmap": lambda: expected.speedup_heatmap(pd.DataFrame(
        [{"alpha": a, "gamma": g, "c": 0.1, "speedup": 1 + a - 0.1 * g} for a in (0.2, 0.5, 0.8) for g in (1, 2, 4)])),
    "expected.break_even_chart": lambda: expected.break_even_chart(frames.break_even()),
    "expected.speedup_vs_alpha_chart": lambda: widgets.theory_chart(0.6, 4, 0.2),
    "expected.forward_time_chart": lambda: expected.forward_time_chart(frames.forward_grid()),
    "expected.dispatch_fit_chart": lambda: expected.dispatch_fit_chart(
        frames.forward_grid().assign(gflops=lambda g: g["n_tokens"] * 0.1),
        type("Fit", (), {"t0_ms": 5.0, "ms_per_gflop": 10.0, "r2": 0.9})()),
    "expected.cost_ratio_chart": lambda: expected.cost_ratio_chart(pd.DataFrame(
        [{"draft": d, "kind": k, "c": c} for d in frames.DRAFTS[1:]
         for k, c in (("FLOPs", 0.05), ("wall clock", 0.1))])),
    "expected.smaller_vs_faster_chart": lambda: expected.smaller_vs_faster_chart(
        pd.DataFrame({"flops_smaller": [1.0, 1.5, 2.25], "times_faster": [1.0, 1.4, 1.9]}),
        pd.DataFrame({"draft": ["smollm2-draft-xs"], "flops_smaller": [37.3], "times_faster": [17.6]})),
    "measured.speedup_chart": lambda: measured.speedup_chart(SUMMARY, predictions=frames.predictions()),
    "measured.stage_breakdown_chart": lambda: measured.stage_breakdown_chart(SUMMARY),
    "measured.metric_chart": lambda: measured.metric_chart(SPEC, "tok_s"),
    "measured.c_alpha_chart": lambda: measured.c_alpha_chart(frames.c_alpha()),
    "measured.acceptance_strip_chart": lambda: measured.acceptance_strip_chart(pd.DataFrame(
        [{"draft": d, "gamma": 3, "categories": c, "prompt_ids": f"{c}-01", "alpha": 0.1 * i + 0.3 * j, "speedup": 1.0}
         for i, d in enumerate(frames.DRAFTS) for j, c in enumerate(("code", "summarisation"))])),
    "measured.histogram_chart": lambda: measured.histogram_chart(frames.simulated_runs(), "alpha", "α", "α",
                                                                 color="draft"),
    "measured.per_token_vs_batch_chart": lambda: measured.per_token_vs_batch_chart(pd.DataFrame(
        [{"n_tokens": n, "batch_size": b, "median_ms": 50.0 + n * b} for n in (1, 3) for b in (1, 4)])),
    "measured.step_cost_chart": lambda: measured.step_cost_chart(frames.steps()),
    "measured.alpha_chart": lambda: measured.alpha_chart(SUMMARY),
    "measured.accept_length_chart": lambda: widgets.measured_explorer(
        lambda gamma: measured.accept_length_chart(frames.records(), gamma), SPEC, "gamma", False),
    "measured.ragged_cost_chart": lambda: measured.ragged_cost_chart(frames.ragged()),
    "predicted.cost_model_chart": lambda: predicted.cost_model_chart(frames.cost_grid(), frames.cost_models()),
    "predicted.acceptance_profile_chart": lambda: predicted.acceptance_profile_chart(
        frames.profile(), frames.per_prompt_profile()),
    "predicted.prediction_chart": lambda: predicted.prediction_chart(frames.prediction_table()),
    "predicted.validation_chart": lambda: predicted.validation_chart(frames.validation()),
    "predicted.verdict_heatmap": lambda: predicted.verdict_heatmap(pd.DataFrame(
        [{"draft_speed": s, "alpha": a, "recommended_gamma": 3 if a == "0.8" else None, "best_speedup": 1.0 + s / 10,
          "break_even_alpha": 0.1} for s in (1.0, 2.0) for a in ("measured", "0.8")]), x="draft_speed", y="alpha"),
    "predicted.reference_chart": lambda: predicted.reference_chart(frames.reference()),
    "engine_options.speedup_chart": lambda: engine_options.speedup_chart(methods()),
    "engine_options.fidelity_chart": lambda: engine_options.fidelity_chart(methods()),
    "engine_options.tax_chart": lambda: engine_options.tax_chart(*tax()),
    "engine_options.batching_chart": lambda: engine_options.batching_chart(pd.DataFrame(
        {"batch_size": [1, 2, 4], "throughput_x": [1.0, 1.6, 2.5], "latency_x": [1.0, 1.2, 1.6]})),
    "load_curves.speedup_chart": lambda: load_curves.speedup_chart(serving()),
    "load_curves.latency_throughput_chart": lambda: load_curves.latency_throughput_chart(serving()),
    "load_curves.position_chart": lambda: load_curves.position_chart(serving()),
    "load_curves.prediction_chart": lambda: load_curves.prediction_chart(
        serving()[lambda f: f["config"] != "spec-off"]),
}


def chart_functions() -> list[str]:
    return sorted(f"{m.__name__.rsplit('.', 1)[1]}.{name}" for m in MODULES
                  for name, fn in inspect.getmembers(m, inspect.isfunction)
                  if fn.__module__ == m.__name__ and name.endswith(("_chart", "_heatmap")))


def test_every_chart_function_has_a_builder():
    assert sorted(set(chart_functions()) - set(BUILDERS)) == []


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_chart_reads_true(name):
    """No two series of a panel in one colour, no row hidden under another's mark, no clipped label."""
    assert lint.problems(BUILDERS[name]()) == []
