"""Notebook 08's text and charts name the load by its kind: concurrent requests for a closed loop,
requests/s for open-loop arrivals (a rate read as a concurrency would misstate every level); the
policy prints as the engine takes it."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd

from specnb.app.charts import load_curves
from specnb.app.serving_keys import IDENTICAL_SHARE, config_key
from specnb.app.text.nb08_serving import (
    crossover_line,
    launch_verdict,
    policy_text,
    serving_conclusion,
    sweep_text,
    trace_forecast_text,
)
from specnb.measure.serving_stats import crossover
from specnb.predict.policy_record import Policy
from specnb.predict.serving_decision import ServingDecision, decide, with_trace


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
    levels = summary("concurrency")
    levels.loc[levels["config"] != "spec-off", "speedup_tpot_lo"] = 0.8
    decision = decide(levels, engine="llama.cpp")
    report = policy_text(decision)
    assert "no `--speculative-config`" in report.markdown and "num_speculative_tokens" not in report.markdown
    assert "no --spec-type (spec-off)" in report.markdown
    assert report.values["policy_vllm"] == "no --speculative-config"
    verdict, launch = launch_verdict(decision)
    end = serving_conclusion(crossover(levels, "speedup_tpot"), pd.DataFrame(), verdict, "AMD EPYC").markdown
    assert end.startswith("- **verdict**: launch without speculation for 1–4 concurrent") and launch == ""


def test_a_paying_policy_prints_the_schedule():
    levels = summary("concurrency")
    report = policy_text(decide(levels, engine="vllm"))
    config = json.loads(report.values["policy_vllm"])
    assert config["method"] == "ngram" and config["num_speculative_tokens_per_batch_size"] == [[1, 3, 3], [4, 4096, 0]]


def test_a_policy_that_drafts_at_every_level_is_printed_without_a_schedule():
    levels = summary("concurrency")
    ngram = levels["config"] == "ngram k=3"
    levels.loc[ngram, ["speedup_tpot", "speedup_tpot_lo", "mean_tpot_ms"]] = [1.3, 1.2, 20 / 1.3]
    config = json.loads(policy_text(decide(levels, engine="vllm")).values["policy_vllm"])
    assert config == {"method": "ngram", "num_speculative_tokens": 3}


def test_a_paying_eagle3_policy_names_the_method_and_the_heads_folder(tmp_path):
    from specnb.serve.vllm.vllm_server import VllmConfig

    levels = summary("concurrency").replace({"config": {"ngram k=3": "eagle3 k=3"}, "family": {"ngram": "eagle3"}})
    levels["uses_model"] = levels["family"] == "eagle3"
    (tmp_path / "config.json").write_text("{}")
    configs = [VllmConfig(model="/hf/verifier"),
               VllmConfig(model="/hf/verifier", method="eagle3", draft=str(tmp_path), k=3)]
    decision = decide(levels, engine="vllm", configs=configs)
    report = policy_text(decision)
    config = json.loads(report.values["policy_vllm"])
    assert config == {"method": "eagle3", "num_speculative_tokens": 3, "model": str(tmp_path),
                      "num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 4096, 0]]}
    assert report.values["policy_vllm"] == decision.launch_json == decision.launch_line  # one launch, as launched
    assert "eagle3" in report.markdown and "llama-server" not in report.markdown  # launched on vLLM only
    at_endpoint = json.loads(policy_text(decide(levels, engine="vllm")).values["policy_vllm"])
    assert at_endpoint["method"] == "eagle3" and at_endpoint["model"] == "<the eagle3 model's folder>"


def test_the_identical_share_is_counted_over_every_level():
    levels = summary("concurrency")
    levels.loc[(levels["config"] == "ngram k=3") & (levels["concurrency"] == 4), "identical_outputs"] = 1
    report = sweep_text(levels, crossover(levels, "speedup_tpot"))
    assert "9/12 outputs identical to spec-off over every level (75%)" in report.markdown
    assert report.values[config_key("ngram k=3", IDENTICAL_SHARE)] == 0.75


def scheduled(server, configs=()) -> ServingDecision:
    """A decision whose launch is the schedule ``server`` (as ``decide`` makes one on vLLM)."""
    empty = Policy(levels=(), keyed_on="concurrency", columns=())
    return ServingDecision(seed=0, engine="vllm", policy=empty, launched=empty, kind="schedule",
                           config="adaptive", server=server, launch_json=server.engine.launch_text(server),
                           configs=tuple(configs))


def test_the_adaptive_text_states_the_launch_each_level_and_the_trace(tmp_path):
    from specnb.app.policy_run import PolicyRun
    from specnb.app.text.nb08_serving import adaptive_text
    from specnb.measure.serving_sweep import Sweep
    from specnb.serve.vllm.vllm_server import VllmConfig

    launched = VllmConfig(model="/hf/verifier", method="ngram", k=4, schedule=[(1, 3, 4), (4, 4096, 0)],
                          adaptive=True)
    loop = PolicyRun(sweep=Sweep(records=pd.DataFrame(), runs=pd.DataFrame()), decision=scheduled(launched), rate=1.5)
    check = pd.DataFrame({"concurrency": [1, 4], "speedup_tpot": [1.3, 0.9], "speedup_tpot_lo": [1.1, 0.8],
                          "speedup_tpot_hi": [1.5, 1.0], "best_static": ["ngram k=4", "spec-off"],
                          "best_static_speedup_tpot": [1.35, 1.0], "ratio": [1.3 / 1.35, 0.9], "meets": [True, False]})
    trace = pd.DataFrame({"config": ["spec-off", "ngram k=4"], "mean_tpot_ms": [80.0, 90.0],
                          "adaptive_mean_tpot_ms": [70.0, 70.0], "adaptive_speedup_tpot": [1.1, 1.2],
                          "adaptive_speedup_tpot_lo": [1.05, 1.1], "adaptive_speedup_tpot_hi": [1.2, 1.3],
                          "beats": [True, True]})
    report = adaptive_text(check, trace, loop)
    assert '"num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 4096, 0]]' in report.markdown
    line = "4 concurrent: adaptive 0.90x [0.80–1.00] against spec-off 1.00x: 0.90 of it (misses ≥ 0.95)"
    assert line in report.markdown
    assert "faster than every static configuration" in report.markdown and report.values["adaptive_min_ratio"] == 0.9
    assert not report.values["adaptive_meets_every_level"] and report.values["adaptive_beats_every_static_on_trace"]
    head = replace(launched, method="eagle3", draft=str(tmp_path), k=3, schedule=[(1, 3, 3), (4, 4096, 0)])
    (tmp_path / "config.json").write_text("{}")
    spec = json.loads(adaptive_text(check, trace, replace(loop, decision=scheduled(head))).values["adaptive"])
    assert spec["method"] == "eagle3" and spec["model"] == str(tmp_path)  # what was launched, the head included
    none = adaptive_text(pd.DataFrame(), pd.DataFrame(), PolicyRun(sweep=loop.sweep, note="ngram did not pay"))
    assert none.markdown == "No `adaptive` launch: ngram did not pay." and none.values == {"adaptive": "none"}


def test_a_schedule_the_trace_did_not_prove_gives_way_to_the_configuration_it_lost_to():
    from specnb.app.policy_run import PolicyRun
    from specnb.app.text.nb08_serving import adaptive_text
    from specnb.measure.serving_sweep import Sweep
    from specnb.serve.vllm.vllm_server import VllmConfig

    static = [VllmConfig(model="/hf/verifier"),
              VllmConfig(model="/hf/verifier", method="ngram", k=4)]
    decision = scheduled(replace(static[1], adaptive=True, schedule=[(1, 3, 4), (4, 4096, 0)]), static)
    loop = PolicyRun(sweep=Sweep(records=pd.DataFrame(), runs=pd.DataFrame()), rate=1.1, decision=decision)

    def trace(off_ms, ngram_ms):  # every CI clear of 1: the lower mean TPOT is the faster
        won, best = 138.0 < min(off_ms, ngram_ms), "spec-off" if off_ms < ngram_ms else "ngram k=4"
        over_best = [1.0, 0.9] if best == "spec-off" else [0.9, 1.0]
        return pd.DataFrame({"config": ["spec-off", "ngram k=4"], "mean_tpot_ms": [off_ms, ngram_ms],
                             "adaptive_mean_tpot_ms": [138.0, 138.0],
                             "adaptive_speedup_tpot": [1.05, 1.1] if won else [0.98, 0.95],
                             "adaptive_speedup_tpot_lo": [1.02, 1.05] if won else [0.95, 0.90],
                             "adaptive_speedup_tpot_hi": [1.08, 1.15] if won else [1.01, 0.99],
                             "best": "adaptive" if won else best, "speedup_over_best": over_best,
                             "speedup_over_best_lo": [x if x == 1 else x - 0.03 for x in over_best],
                             "speedup_over_best_hi": [x if x == 1 else x + 0.03 for x in over_best],
                             "beats": [won, won]})

    judged = lambda table: adaptive_text(pd.DataFrame(), table, loop, with_trace(decision, table))  # noqa: E731
    lost = judged(trace(140.0, 131.0))
    assert lost.values["vllm_launch_for_trace"] == json.dumps(
        {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4})
    assert "launch for load like this trace: **ngram k=4**" in lost.markdown
    assert "adaptive ran 0.95x [0.90–0.99] of its speed" in lost.markdown
    off = judged(trace(135.0, 150.0))
    assert off.values["vllm_launch_for_trace"] == ""
    assert "**spec-off**, no `--speculative-config`" in off.markdown
    won = judged(trace(150.0, 160.0))
    assert won.values["vllm_launch_for_trace"] == decision.launch_json and "the adaptive line above" in won.markdown


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
    ks = {"spec-off": 0, "ngram k=2": 2, "ngram k=4": 4, "adaptive": 4}
    difficulty = rng.uniform(0.8, 1.2, size=16)
    rows = []
    for config, ms in tpot_ms.items():
        tpot = ms / 1e3 * difficulty * rng.uniform(1 - spread, 1 + spread, size=16)
        rows.append(pd.DataFrame({"config": config, "load": "open", "request_rate": 1.1, "k": ks[config], "round": 0,
                                  "prompt_index": range(16),
                                  "prompt_id": [f"p{i}" for i in range(16)], "success": True, "output_tokens": 11,
                                  "ttft": 0.1, "latency": 0.1 + 10 * tpot, "tpot": tpot}))
    return pd.concat(rows, ignore_index=True)


def launch_for(tpot_ms: dict[str, float], spread: float = 0.05) -> tuple[str, str]:
    from specnb.app.text.nb08_serving import trace_launch
    from specnb.measure.serving_stats import trace_check
    from specnb.serve.vllm.vllm_server import VllmConfig

    configs = [VllmConfig(model="/hf/verifier")] + [
        VllmConfig(model="/hf/verifier", method="ngram", k=k) for k in (2, 4)]
    table = trace_check(trace_records(tpot_ms, spread), n_boot=400)
    decision = with_trace(scheduled(replace(configs[2], adaptive=True, schedule=[(1, 3, 4), (4, 4096, 0)]), configs),
                          table)
    return trace_launch(decision, table), decision.launch_line


def test_the_trace_launches_adaptive_only_where_its_ci_beats_every_static_configuration():
    line, value = launch_for({"spec-off": 130.6, "ngram k=2": 128.0, "ngram k=4": 127.0, "adaptive": 90.0})
    assert json.loads(value)["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 4096, 0]]
    assert "the adaptive line above" in line


def test_a_trace_within_noise_goes_to_the_simplest_configuration():
    # adaptive's 129.1 ms against spec-off's 130.6 ms: inside the noise, so spec-off, the simplest
    line, value = launch_for({"spec-off": 130.6, "ngram k=2": 131.5, "ngram k=4": 132.0, "adaptive": 129.1})
    assert value == "" and "**spec-off**, no `--speculative-config`" in line


def test_a_static_configuration_clearly_best_on_the_trace_is_launched():
    line, value = launch_for({"spec-off": 130.6, "ngram k=2": 125.0, "ngram k=4": 90.0, "adaptive": 120.0})
    assert json.loads(value)["num_speculative_tokens"] == 4 and "**ngram k=4**" in line
    # two static ones inside each other's noise: the smaller k
    line, value = launch_for({"spec-off": 130.6, "ngram k=2": 91.0, "ngram k=4": 90.0, "adaptive": 120.0}, 0.2)
    assert json.loads(value)["num_speculative_tokens"] == 2 and "**ngram k=2**" in line


def test_the_report_gives_one_answer_for_the_load_it_measured():
    from specnb.serve.vllm.vllm_server import VllmConfig

    levels = summary("concurrency")  # ngram k=3 pays at 1 and 2 (CIs above 1), not at 4
    on_vllm, value = launch_verdict(decide(levels, engine="vllm"))
    assert on_vllm.startswith("**verdict**: launch the schedule `--speculative-config '")
    assert json.loads(value)["num_speculative_tokens_per_batch_size"] == [[1, 3, 3], [4, 4096, 0]]
    on_llama, _ = launch_verdict(decide(levels, engine="llama.cpp"))
    # one server per load range, spec-off's a real spec-off: it takes over where 1.2 at 2 and 0.8 at 4 cross 1 (2.8)
    assert "fixes speculation per launch" in on_llama and "3 or more concurrent: no --spec-type (spec-off)" in on_llama
    everywhere = levels.assign(speedup_tpot_lo=1.1)
    everywhere.loc[everywhere["config"] == "ngram k=3", "speedup_tpot"] = 1.3
    configs = [VllmConfig(model="/m"), VllmConfig(model="/m", method="ngram", k=3)]
    line, value = launch_verdict(decide(everywhere, engine="vllm", configs=configs))
    assert line.startswith("**verdict**: launch **ngram k=3**") and json.loads(value)["num_speculative_tokens"] == 3
    end = serving_conclusion(crossover(everywhere, "speedup_tpot"), pd.DataFrame(), line, "m").markdown
    assert end.count("**verdict**") == 1 and "policy:" not in end  # one answer, first


def test_a_trace_that_ran_gives_the_verdict():
    from specnb.measure.serving_stats import trace_check
    from specnb.serve.vllm.vllm_server import VllmConfig

    configs = [VllmConfig(model="/m")] + [VllmConfig(model="/m", method="ngram", k=k) for k in (2, 4)]
    trace = trace_check(trace_records({"spec-off": 130.6, "ngram k=2": 125.0, "ngram k=4": 90.0, "adaptive": 120.0}),
                        n_boot=200)
    line, value = launch_verdict(with_trace(decide(summary("concurrency"), engine="vllm", configs=configs), trace),
                                 trace)
    assert line.startswith("**verdict**: **ngram k=4**") and "judged over the bursty trace" in line
    assert json.loads(value)["num_speculative_tokens"] == 4


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
    from specnb.app.policy_run import PolicyRun
    from specnb.app.text.nb08_serving import adaptive_text
    from specnb.measure.serving_stats import trace_check
    from specnb.measure.serving_sweep import Sweep
    from specnb.serve.vllm.vllm_server import VllmConfig

    configs = [VllmConfig(model="/m")] + [VllmConfig(model="/m", method="ngram", k=k) for k in (2, 4)]
    table = trace_check(trace_records({"spec-off": 130.6, "ngram k=2": 125.0, "ngram k=4": 90.0}), n_boot=200)
    assert set(table["config"]) == set(configs_named(configs)) and table["adaptive_speedup_tpot"].isna().all()
    everywhere = summary("concurrency").assign(speedup_tpot_lo=1.1)
    everywhere.loc[everywhere["config"] == "ngram k=3", "speedup_tpot"] = 1.3
    decision = decide(everywhere, engine="vllm", configs=[*configs, VllmConfig(model="/m", method="ngram", k=3)])
    assert decision.kind == "static" and not decision.checked  # one range: no schedule to launch or check
    judged = with_trace(decision, table)
    assert judged.trace_pick == "ngram k=4" and json.loads(judged.launch_line)["num_speculative_tokens"] == 4
    loop = PolicyRun(sweep=Sweep(records=pd.DataFrame(), runs=pd.DataFrame()), decision=decision, rate=1.1,
                       note="the launch is ngram k=3 at every load")
    report = adaptive_text(pd.DataFrame(), table, loop, judged)
    assert "the static configurations alone" in report.markdown and "adaptive ran" not in report.markdown
    assert "**ngram k=4**" in report.markdown and report.values["adaptive"] == "none"


def configs_named(configs) -> list[str]:
    return [c.name for c in configs]


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
