"""Notebook 08's text and charts name the load by its kind: concurrent requests for a closed loop,
requests/s for open-loop arrivals (a rate read as a concurrency would misstate every level); the
verdict (``serving_verdict.decide``) prints as the engine takes it, the same line in the policy
section and the conclusion, and the bursty trace checks it without changing it."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd

from specnb.app.charts import load_curves
from specnb.app.serving_keys import IDENTICAL_SHARE, config_key
from specnb.app.serving_study import Measured
from specnb.app.text.nb08_serving import (
    adaptive_text,
    candidate_table,
    candidates_text,
    crossover_line,
    policy_text,
    serving_conclusion,
    sweep_text,
    trace_forecast_text,
    verdict_line,
)
from specnb.measure.serving_stats import crossover
from specnb.measure.serving_sweep import Sweep
from specnb.predict.serving_verdict import decide, with_trace


def summary(column: str) -> pd.DataFrame:
    """spec-off and one configuration at three levels, speedups falling through 1.0 between the last two."""
    levels = [0.5, 1.0, 2.0] if column == "request_rate" else [1, 2, 4]
    rows = []
    for config, speedups in (("spec-off", [1.0, 1.0, 1.0]), ("ngram k=3", [1.4, 1.2, 0.8])):
        for level, x in zip(levels, speedups):
            rows.append({"config": config, "load": "open" if column == "request_rate" else "closed",
                         "k": 0 if config == "spec-off" else 3, "family": "none" if config == "spec-off" else "ngram",
                         "uses_model": False, column: level, "alpha": 0.5, "tau": 2.0, "output_throughput": 10.0 * x,
                         "median_tpot_ms": 20 / x, "p90_tpot_ms": 25 / x, "median_itl_ms": 10.0, "partial": False,
                         "spec_decode_num_drafts": 10.0, "per_position": json.dumps([0.5]),
                         "identical_outputs": 4, "paired_requests": 4, "mean_tpot_ms": 20 / x,
                         "tokens_predicted": 100.0, "spec_decode_draft_tokens": 0.0 if config == "spec-off"
                         else 180.0, "spec_decode_accepted_tokens": 0.0 if config == "spec-off" else 40.0,
                         **{f"{m}{s}": x * f for m in ("speedup_tpot", "speedup_output_throughput")
                            for s, f in (("", 1.0), ("_lo", 0.9), ("_hi", 1.1))}})
    return pd.DataFrame(rows)


def losing(levels: pd.DataFrame) -> pd.DataFrame:
    """``levels`` with ngram k=3 slower than spec-off beyond its CI at every level."""
    ngram = levels["config"] == "ngram k=3"
    for x, level in zip([0.8, 0.7, 0.6], [1, 2, 4]):
        at = ngram & (levels["concurrency"] == level)
        levels.loc[at, ["speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi", "mean_tpot_ms"]] = [x, x * 0.9, x * 1.1,
                                                                                                  20 / x]
    return levels


def drafting_everywhere(levels: pd.DataFrame) -> pd.DataFrame:
    """``levels`` with ngram k=3 at 1.3x [1.17–1.43] at every level."""
    ngram = levels["config"] == "ngram k=3"
    levels.loc[ngram, ["speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi", "mean_tpot_ms"]] = [1.3, 1.17, 1.43,
                                                                                                20 / 1.3]
    return levels


def chart_text(chart) -> str:
    return json.dumps(chart.to_dict())


def test_poisson_levels_read_as_requests_per_second():
    rates = summary("request_rate")
    crossings = crossover(rates, "speedup_tpot")
    line = crossover_line(crossings.iloc[0].to_dict())
    assert "requests/s" in line and "log request rate" in line and "concurren" not in line
    text = sweep_text(rates, crossings).markdown
    assert "at 0.5 req/s" in text and "at 2 req/s" in text and "concurren" not in text
    assert "requests/s" in load_curves.display_table(rates).columns
    for chart in (load_curves.speedup_chart(rates), load_curves.latency_throughput_chart(rates)):
        assert '"request_rate"' in chart_text(chart) and "concurren" not in chart_text(chart)
    assert "requests/s" in chart_text(load_curves.speedup_chart(rates))


def test_closed_loop_levels_read_as_concurrent_requests():
    levels = summary("concurrency")
    crossings = crossover(levels, "speedup_tpot")
    assert "concurrent requests" in crossover_line(crossings.iloc[0].to_dict())
    assert "at 1 concurrent" in sweep_text(levels, crossings).markdown
    assert "concurrent requests" in chart_text(load_curves.speedup_chart(levels))
    assert "req/s" not in sweep_text(levels, crossings).markdown


def test_a_policy_that_never_pays_says_no_speculative_config_for_both_engines():
    levels = losing(summary("concurrency"))
    for engine in ("llama.cpp", "vllm"):
        verdict = decide(levels, engine=engine)
        assert verdict.kind == "none" and verdict.line == ""  # nothing to paste: the launch has no flags
        report = policy_text(verdict)
        assert "no `--speculative-config`" in report.markdown and "num_speculative_tokens" not in report.markdown
        assert report.values["policy_vllm"] == "no --speculative-config" and report.values["policy_llama_server"] == []
        end = serving_conclusion(crossover(levels, "speedup_tpot"), pd.DataFrame(), verdict, "AMD EPYC").markdown
        assert end.startswith("- **verdict**: launch **no speculation** for 1–4 concurrent")
        assert "beat it beyond the noise" in end


def test_a_paying_policy_prints_the_schedule():
    levels = summary("concurrency")
    verdict = decide(levels, engine="vllm")
    report = policy_text(verdict)
    config = json.loads(report.values["policy_vllm"])
    assert config["method"] == "ngram" and config["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 4096, 0]]
    assert verdict.kind == "schedule" and json.loads(verdict.line) == config  # the line printed is the one launched
    assert f"```\n{verdict.line}\n```" in report.markdown and "Over the engine's batch" in report.markdown
    assert "1 concurrent (engine's batch 1.0): ngram k=3 (k = 3), TPOT speedup 1.40x" in report.markdown
    assert "4 concurrent (engine's batch 4.0): k = 0 (0.95x of spec-off" in report.markdown


def test_a_policy_that_drafts_at_every_level_is_printed_without_a_schedule():
    levels = drafting_everywhere(summary("concurrency"))
    verdict = decide(levels, engine="vllm")
    report = policy_text(verdict)
    config = json.loads(report.values["policy_vllm"])
    assert config == {"method": "ngram", "num_speculative_tokens": 3} and verdict.kind == "static"
    assert "per_batch_size" not in report.markdown and "Over the engine's batch" not in report.markdown
    launched = decide(levels, engine="vllm", configs=vllm_configs(3))  # the server's line: its n-gram window too
    assert policy_text(launched).values["policy_vllm"] == launched.line and "prompt_lookup_max" in launched.line


def test_a_paying_eagle3_policy_names_the_method_and_the_heads_folder(tmp_path):
    from specnb.serve.vllm import VllmConfig

    levels = summary("concurrency").replace({"config": {"ngram k=3": "eagle3 k=3"}, "family": {"ngram": "eagle3"}})
    levels["uses_model"] = levels["family"] == "eagle3"
    (tmp_path / "config.json").write_text("{}")
    configs = [VllmConfig(model="/hf/verifier"),
               VllmConfig(model="/hf/verifier", method="eagle3", draft=str(tmp_path), k=3)]
    verdict = decide(levels, engine="vllm", configs=configs)
    report = policy_text(verdict)
    config = json.loads(report.values["policy_vllm"])
    assert config == {"method": "eagle3", "num_speculative_tokens": 3, "model": str(tmp_path),
                      "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 4096, 0]]}
    assert json.loads(verdict.line) == config  # one launch: what is printed is what is launched
    assert verdict.checked and verdict.server.engine.launch_text(verdict.server) == verdict.line
    assert "eagle3" in report.markdown and "llama-server" not in report.markdown  # launched on vLLM only
    at_endpoint = json.loads(policy_text(decide(levels, engine="vllm")).values["policy_vllm"])
    assert at_endpoint["method"] == "eagle3" and at_endpoint["model"] == "<the eagle3 model's folder>"


def test_the_identical_share_is_counted_over_every_level():
    levels = summary("concurrency")
    levels.loc[(levels["config"] == "ngram k=3") & (levels["concurrency"] == 4), "identical_outputs"] = 1
    report = sweep_text(levels, crossover(levels, "speedup_tpot"))
    assert "9/12 outputs identical to spec-off over every level (75%)" in report.markdown
    assert report.values[config_key("ngram k=3", IDENTICAL_SHARE)] == 0.75


def vllm_configs(*ks: int) -> list:
    from specnb.serve.vllm import VllmConfig

    return [VllmConfig(model="/hf/verifier")] + [VllmConfig(model="/hf/verifier", method="ngram", k=k) for k in ks]


def measured(verdict, **fields) -> Measured:
    """What the study measured and judged, its sweep empty: only the verdict and its checks are read."""
    return Measured(sweep=Sweep(records=pd.DataFrame(), runs=pd.DataFrame()), verdict=verdict, **fields)


def test_the_adaptive_text_states_the_launch_each_level_and_the_trace(tmp_path):
    from specnb.serve.vllm import VllmConfig

    verdict = decide(summary("concurrency"), engine="vllm", configs=vllm_configs(3))
    assert verdict.kind == "schedule" and verdict.checked  # vLLM runs a schedule as one server
    sweep = Sweep(records=pd.DataFrame(), runs=pd.DataFrame())
    loop = measured(verdict, check=sweep, trace=sweep, rate=1.5)
    check = pd.DataFrame({"concurrency": [1, 4], "speedup_tpot": [1.3, 0.9], "speedup_tpot_lo": [1.1, 0.8],
                          "speedup_tpot_hi": [1.5, 1.0], "best_static": ["ngram k=3", "spec-off"],
                          "best_static_speedup_tpot": [1.35, 1.0], "ratio": [1.3 / 1.35, 0.9], "meets": [True, False]})
    trace = pd.DataFrame({"config": ["spec-off", "ngram k=3"], "mean_tpot_ms": [80.0, 90.0],
                          "speedup_tpot": [1.0, 0.89], "speedup_tpot_lo": [1.0, 0.85], "speedup_tpot_hi": [1.0, 0.93],
                          "adaptive_mean_tpot_ms": [70.0, 70.0], "adaptive_speedup_tpot": [1.1, 1.2],
                          "adaptive_speedup_tpot_lo": [1.05, 1.1], "adaptive_speedup_tpot_hi": [1.2, 1.3],
                          "best": "adaptive", "beats": [True, True]})
    judged = with_trace(verdict, trace)
    report = adaptive_text(check, trace, replace(loop, verdict=judged))
    assert '"num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 4096, 0]]' in report.markdown
    assert report.values["adaptive"] == verdict.line  # the server checked is the one the verdict prints
    line = "4 concurrent: adaptive 0.90x [0.80–1.00] against spec-off 1.00x: 0.90 of it (misses ≥ 0.95)"
    assert line in report.markdown and report.values["adaptive_min_ratio"] == 0.9
    assert not report.values["adaptive_meets_every_level"]
    assert "bursty trace at 1.50 requests/s on average: mean TPOT adaptive 70.0 ms" in report.markdown
    assert "over the bursty trace the launch measured 1.10x [1.05–1.20] over spec-off; nothing ran faster beyond " \
           "the noise" in report.markdown
    (tmp_path / "config.json").write_text("{}")
    heads = [VllmConfig(model="/hf/verifier"), VllmConfig(model="/hf/verifier", method="eagle3", draft=str(tmp_path),
                                                          k=3)]
    eagle = summary("concurrency").replace({"config": {"ngram k=3": "eagle3 k=3"}, "family": {"ngram": "eagle3"}})
    on_heads = decide(eagle.assign(uses_model=eagle["family"] == "eagle3"), engine="vllm", configs=heads)
    spec = json.loads(adaptive_text(check, trace, replace(loop, verdict=on_heads)).values["adaptive"])
    assert spec["method"] == "eagle3" and spec["model"] == str(tmp_path)  # what was launched, the head included
    none = adaptive_text(pd.DataFrame(), pd.DataFrame(), measured(decide(losing(summary("concurrency")),
                                                                         engine="vllm"), note="ngram did not pay"))
    assert none.markdown == "No `adaptive` launch: ngram did not pay." and none.values == {"adaptive": "none"}


def test_a_trace_that_finds_a_faster_configuration_names_it_and_keeps_the_launch():
    verdict = decide(summary("concurrency"), engine="vllm", configs=vllm_configs(3, 4))
    assert verdict.kind == "schedule"

    def trace(off_ms, ngram_ms):  # every CI clear of 1: the lower mean TPOT is the faster
        won, best = 138.0 < min(off_ms, ngram_ms), "spec-off" if off_ms < ngram_ms else "ngram k=4"
        return pd.DataFrame({"config": ["spec-off", "ngram k=4"], "mean_tpot_ms": [off_ms, ngram_ms],
                             "adaptive_mean_tpot_ms": [138.0, 138.0],
                             "adaptive_speedup_tpot": [1.05, 1.1] if won else [0.98, 0.95],
                             "adaptive_speedup_tpot_lo": [1.02, 1.05] if won else [0.95, 0.90],
                             "adaptive_speedup_tpot_hi": [1.08, 1.15] if won else [1.01, 0.99],
                             "best": "adaptive" if won else best, "beats": [won, won]})

    lost = with_trace(verdict, trace(140.0, 131.0))
    assert lost.line == verdict.line and lost.kind == "schedule"  # the trace checks the launch, never replaces it
    assert "ngram k=4 ran faster there beyond the noise" in lost.trace and "0.98x [0.95–1.01]" in lost.trace
    assert verdict_line(lost).endswith(lost.trace) and verdict_line(lost).startswith(verdict_line(verdict))
    won = with_trace(verdict, trace(150.0, 160.0))
    assert won.line == verdict.line and "nothing ran faster beyond the noise" in won.trace
    assert with_trace(verdict, pd.DataFrame()) == verdict  # no trace: nothing added


def crossing_of(speedups: list[float], half_width: float) -> dict:
    rows = [{"config": "ngram k=3", "load": "closed", "concurrency": level, "speedup_tpot": x,
             "speedup_tpot_lo": x - half_width,
             "speedup_tpot_hi": x + half_width} for level, x in zip([1, 2, 4, 8], speedups)]
    return crossover(pd.DataFrame(rows), "speedup_tpot").iloc[0].to_dict()


def test_a_crossover_line_claims_paying_or_losing_only_outside_the_noise():
    clear = crossover_line(crossing_of([1.5, 1.4, 1.3, 1.3], 0.1))
    assert "still pays at 8 concurrent requests" in clear
    noisy = crossover_line(crossing_of([1.5, 1.4, 1.3, 1.05], 0.1))
    assert "no measurable difference at 8 concurrent requests" in noisy and "still pays" not in noisy
    dip = crossover_line(crossing_of([1.5, 0.7, 0.8, 1.3], 0.1))
    assert "loses between 2 and 4 concurrent requests" in dip and "pays again at 8" in dip
    assert "stops paying" not in dip
    shallow = crossover_line(crossing_of([1.5, 0.95, 1.3, 1.3], 0.1))
    assert "no measurable difference" in shallow and "loses" not in shallow


def trace_records(tpot_ms: dict[str, float], spread: float = 0.05, seed: int = 0) -> pd.DataFrame:
    """A trace's requests: 16 prompts, 11 tokens each, every configuration's TPOT ``tpot_ms`` on average,
    each request off by its own ±``spread`` (plus the prompt's own difficulty, shared by all)."""
    rng = np.random.default_rng(seed)
    ks = {"spec-off": 0, "ngram k=2": 2, "ngram k=3": 3, "ngram k=4": 4, "adaptive": 4}
    difficulty = rng.uniform(0.8, 1.2, size=16)
    rows = []
    for config, ms in tpot_ms.items():
        tpot = ms / 1e3 * difficulty * rng.uniform(1 - spread, 1 + spread, size=16)
        rows.append(pd.DataFrame({"config": config, "load": "open", "request_rate": 1.1, "k": ks[config], "round": 0,
                                  "prompt_index": range(16),
                                  "prompt_id": [f"p{i}" for i in range(16)], "success": True, "output_tokens": 11,
                                  "ttft": 0.1, "latency": 0.1 + 10 * tpot, "tpot": tpot}))
    return pd.concat(rows, ignore_index=True)


def test_the_trace_never_changes_the_launch_line():
    """Whatever the bursty trace measures, the launch is the sweep's: the trace adds one line
    (``Verdict.trace``), naming a configuration that ran faster beyond the noise, if one did."""
    from specnb.measure.serving_stats import trace_check

    verdict = decide(drafting_everywhere(summary("concurrency")), engine="vllm", configs=vllm_configs(2, 3, 4))
    assert verdict.kind == "static" and verdict.chosen.name == "ngram k=3"
    clear = trace_check(trace_records({"spec-off": 130.6, "ngram k=2": 125.0, "ngram k=3": 100.0, "ngram k=4": 70.0}),
                        n_boot=400)
    near = trace_check(trace_records({"spec-off": 130.6, "ngram k=2": 131.5, "ngram k=3": 129.1,
                                      "ngram k=4": 130.0}), n_boot=400)
    for table in (clear, near):
        judged = with_trace(verdict, table)
        assert (judged.line, judged.kind, judged.chosen, judged.policy) == (verdict.line, verdict.kind,
                                                                            verdict.chosen, verdict.policy)
        assert judged.trace.startswith("over the bursty trace the launch measured ")
    assert "ngram k=4 ran faster there beyond the noise" in with_trace(verdict, clear).trace
    assert "nothing ran faster beyond the noise" in with_trace(verdict, near).trace
    off = decide(losing(summary("concurrency")), engine="vllm")
    assert "measured spec-off itself" in with_trace(off, near).trace and with_trace(off, near).line == ""


def test_the_report_gives_one_answer_for_the_load_it_measured():
    levels = summary("concurrency")  # ngram k=3 pays at 1 and 2 (CIs above 1), not at 4
    on_vllm = decide(levels, engine="vllm")
    line = verdict_line(on_vllm)
    assert line.startswith("**verdict**: launch **the ngram schedule (ngram k=3 at 1, ngram k=3 at 2, k = 0 at 4)** (`")
    assert f"(`{on_vllm.line}`)" in line and "for 1–4 concurrent" in line
    assert json.loads(on_vllm.line)["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 4096, 0]]
    on_llama = verdict_line(decide(levels, engine="llama.cpp"))
    # one server per load range, spec-off's a real spec-off: it takes over where 1.2 at 2 and 0.8 at 4 cross 1 (2.8)
    assert "fixes speculation per launch" in on_llama and "3 or more concurrent: no --spec-type (spec-off)" in on_llama
    everywhere = drafting_everywhere(summary("concurrency"))
    static = decide(everywhere, engine="vllm", configs=vllm_configs(3))
    line = verdict_line(static)
    assert line.startswith("**verdict**: launch **ngram k=3 at every load**")
    assert json.loads(static.line)["num_speculative_tokens"] == 3
    end = serving_conclusion(crossover(everywhere, "speedup_tpot"), pd.DataFrame(), static, "m").markdown
    assert end.startswith(f"- {line}") and end.count("**verdict**") == 1  # one answer, first
    assert policy_text(static).markdown.endswith(line)  # the policy section says the same line
    assert "minimum detectable effect" in end


def test_a_tie_names_what_it_is_tied_with_and_how_sure_it_is():
    levels = summary("concurrency")
    ngram = levels["config"] == "ngram k=3"
    levels.loc[ngram, ["speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi"]] = [[1.02, 0.92, 1.13]] * 3
    levels.loc[ngram, ["launch_pairs", "critical"]] = [10, 1.959964]  # a band resting on 10 launch pairs
    verdict = decide(levels, engine="vllm")
    assert verdict.kind == "none" and verdict.sure == "tie" and [t.name for t in verdict.tied] == ["ngram k=3"]
    line = verdict_line(verdict)
    assert "(a tie within the noise: the simplest kept)" in line and "ngram k=3 is within the noise" in line
    # a 15% gain, inside a band as wide as one A/A pair leaves it (c 12.7) but beyond it with the noise known
    one_pair = levels.copy()
    one_pair.loc[ngram, ["speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi", "tpot_log_var", "launch_sigma",
                         "launch_pairs", "critical"]] = [[1.15, 0.35, 3.8, 0.0004, 0.03, 1, 12.7]] * 3
    unsure = decide(one_pair, engine="vllm")
    assert unsure.sure == "inconclusive" and "**inconclusive**" in verdict_line(unsure)
    assert f"this run resolves {unsure.mde:.0%} (minimum detectable effect)" in verdict_line(unsure)
    table = candidate_table(verdict)
    assert set(table["state"]) == {"launch", "tied"} and len(table) == 2 * 3
    assert "ngram k=3 " in candidates_text(verdict) and "(within the noise)" in candidates_text(verdict)


def test_a_dip_at_one_level_is_named_as_that_level():
    line = crossover_line(crossing_of([0.7, 1.4, 1.4, 1.3], 0.1))
    assert "loses at 1 concurrent requests" in line and "between 1 and 1" not in line


def test_the_trace_forecast_is_reported_first_and_the_reconstruction_as_a_diagnostic():
    def table(errors):
        return pd.DataFrame({"config": ["ngram k=2", "adaptive"], "predicted_speedup_tpot": [1.1, 1.2],
                             "measured_speedup_tpot": [1.0, 1.25], "measured_lo": [0.95, 1.2],
                             "measured_hi": [1.05, 1.3], "error": errors, "clamped_share": [0.0, 0.3]})

    report = trace_forecast_text(table([0.1, 0.04]), table([0.02, 0.01]))
    assert report.values == {"trace_forecast_median_error": 0.07, "trace_reconstruction_median_error": 0.015}
    text = report.markdown
    assert text.index("forecast 1.10x before the trace was sent") < text.index("diagnostic")
    assert "30% of its decoding beyond the batches measured" in text and "**7.0%**" in text
    none = trace_forecast_text(table([0.1, 0.04]).iloc[:0], table([0.02, 0.01]))
    assert "No trace forecast" in none.markdown and set(none.values) == {"trace_reconstruction_median_error"}


def test_a_static_launch_is_judged_over_a_trace_of_the_static_configurations_alone():
    from specnb.measure.serving_stats import trace_check

    configs = vllm_configs(2, 3, 4)
    table = trace_check(trace_records({"spec-off": 130.6, "ngram k=2": 125.0, "ngram k=3": 110.0, "ngram k=4": 90.0}),
                        n_boot=200)
    assert set(table["config"]) == {c.name for c in configs} and table["adaptive_speedup_tpot"].isna().all()
    verdict = decide(drafting_everywhere(summary("concurrency")), engine="vllm", configs=configs)
    assert verdict.kind == "static" and not verdict.checked  # one range: no schedule to launch or check
    judged = with_trace(verdict, table)
    assert judged.line == verdict.line and json.loads(judged.line)["num_speculative_tokens"] == 3
    assert "ngram k=4 ran faster there beyond the noise" in judged.trace
    loop = measured(judged, trace=Sweep(records=pd.DataFrame(), runs=pd.DataFrame()), rate=1.1,
                    note="the launch is ngram k=3 at every load")
    report = adaptive_text(pd.DataFrame(), table, loop)
    assert "no `adaptive` launch: the launch is ngram k=3 at every load" in report.markdown
    assert "adaptive" not in report.markdown.split("bursty trace")[1].split("\n")[0]  # no adaptive run on it
    assert judged.trace in report.markdown and report.values["adaptive"] == "none"


def test_a_configuration_screened_after_the_lowest_level_reads_as_that_level_once():
    """A configuration that lost at the lowest level and was not run above it (``serving_sweep.screen_out``) has
    one row: the sweep's text names that level once, and the others still read lowest to highest."""
    levels = summary("concurrency")
    lost = levels[levels["config"] == "ngram k=3"].iloc[:1].assign(config="eagle3 k=2", family="eagle3")
    both = pd.concat([levels, lost], ignore_index=True)
    text = sweep_text(both, crossover(both, "speedup_tpot")).markdown
    line = next(x for x in text.splitlines() if "**eagle3 k=2**" in x)
    assert line.count("at 1 concurrent") == 1 and "→" not in line and "at 4 concurrent" not in line
    assert "1.40x [1.26–1.54] at 1 concurrent, 0.80x [0.72–0.88] at 4 concurrent" in text and " → " in text


def test_above_one_by_the_points_with_no_ci_above_one_is_no_measurable_difference():
    row = {"config": "ngram k=4", "verdict": "pays at every level measured", "min_level": 1.0, "max_level": 4.0,
           "load": "closed", "ci_excludes_1_lowest": False, "ci_excludes_1_top": False}
    line = crossover_line(row)
    assert "no measurable difference at 1 or at 4 concurrent requests" in line and "pays" not in line
    assert "still pays" in crossover_line(row | {"ci_excludes_1_lowest": True, "ci_excludes_1_top": True})
