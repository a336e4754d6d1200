"""The serving summaries' statistics on hand-built records: the bootstrap's unit (a prompt, with all
its rounds), one generator per row (a CI does not depend on row order), where a configuration pays or
loses, and a trace judged with CIs as the levels are."""

import numpy as np
import pandas as pd
import pytest

from specnb.measure.serving_summary import decode_timed, paired_requests, speedup_ci


def requests(config: str, seconds: list[float], prompt_ids: list[str], rounds: list[int]) -> pd.DataFrame:
    """One level's successful requests: 11 tokens each, 0.1 s to the first, ``seconds`` for the other 10."""
    return pd.DataFrame({"config": config, "concurrency": 4, "round": rounds, "prompt_index": range(len(seconds)),
                         "prompt_id": prompt_ids, "success": True, "output_tokens": 11, "ttft": 0.1,
                         "latency": [0.1 + s for s in seconds]})


def tpot_ci(records: pd.DataFrame, config: str = "ngram k=4") -> tuple[float, float, float]:
    paired = paired_requests(decode_timed(records), config, 4, "spec-off")
    return speedup_ci(paired, "decode_tokens", "decode_s", np.random.default_rng(0), 1000)


def test_a_prompt_cycled_within_a_round_is_one_bootstrap_unit():
    # 8 requests, prompts a and b cycled 4 times each: 2x on a, 1x on b. Two units, so a quarter of the
    # draws are all b (1.0x) and a quarter all a (2.0x): the 95% interval is exactly [1.0, 2.0]; eight
    # independent units would almost never draw all of one prompt
    ids = ["a", "b"] * 4
    records = pd.concat([requests("spec-off", [0.2] * 8, ids, [0] * 8),
                         requests("ngram k=4", [0.1, 0.2] * 4, ids, [0] * 8)])
    point, lo, hi = tpot_ci(records)
    assert point == pytest.approx(1.6 / 1.2) and (lo, hi) == (pytest.approx(1.0), pytest.approx(2.0))


def test_rounds_of_one_prompt_move_together_as_one_cluster():
    # one prompt, two rounds (1x in round 0, 2x in round 1): one cluster, so no interval; as (prompt,
    # round) units it had one, [1.0, 2.0], from a prompt resent to the same server
    records = pd.concat([requests("spec-off", [0.2, 0.2], ["a", "a"], [0, 1]),
                         requests("ngram k=4", [0.2, 0.1], ["a", "a"], [0, 1])]).assign(prompt_index=0)
    point, lo, hi = tpot_ci(records)
    assert point == pytest.approx(0.4 / 0.3) and np.isnan(lo) and np.isnan(hi)


def test_resending_the_same_prompts_in_more_rounds_does_not_narrow_the_ci():
    # six prompts, each at its own speedup; three rounds that repeat round 0 exactly (greedy, same
    # server) carry nothing new: the CI must be round 0's, where (prompt, round) units narrowed it
    rng = np.random.default_rng(3)
    base, spec = list(rng.uniform(0.2, 0.4, 6)), list(rng.uniform(0.1, 0.3, 6))
    ids = [f"p{i}" for i in range(6)]

    def level(rounds: int) -> pd.DataFrame:
        return pd.concat([requests(config, seconds * rounds, ids * rounds, [r for r in range(rounds) for _ in ids])
                          for config, seconds in (("spec-off", base), ("ngram k=4", spec))])

    one, three = tpot_ci(level(1)), tpot_ci(level(3))
    assert three == pytest.approx(one)
    assert one[2] - one[1] > 0.05  # the prompts differ: an interval to narrow
    units = level(3).assign(prompt_id=lambda f: f["prompt_id"] + "/" + f["round"].astype(str))
    _, lo, hi = tpot_ci(units)  # each round a prompt of its own: what the old unit did
    assert hi - lo < 0.8 * (one[2] - one[1])


def sweep_records(seed: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records, runs) of spec-off, ngram k=4 and adaptive at 1 and 4 concurrent: 6 prompts × 2 rounds,
    decode times drawn at random around each configuration's own speed."""
    rng, rows, runs = np.random.default_rng(seed), [], []
    for config, speed in (("spec-off", 1.0), ("ngram k=4", 1.3), ("adaptive", 1.25)):
        for level in (1, 4):
            seconds = rng.uniform(0.1, 0.3, size=12) / speed
            frame = requests(config, list(seconds), [f"p{i % 6}" for i in range(12)], [i // 6 for i in range(12)])
            rows.append(frame.assign(concurrency=level, prompt_index=[i % 6 for i in range(12)], engine="vllm",
                                     partial=False, itl="[]", tpot=seconds / 10, generated_text="x"))
            runs.append({"config": config, "concurrency": level, "duration": float(seconds.sum()),
                         "accepted_per_pos": "[]", "spec_decode_num_drafts": 0.0, "spec_decode_draft_tokens": 0.0,
                         "spec_decode_accepted_tokens": 0.0, "n_decode": 0.0, "tokens_predicted": 0.0})
    return pd.concat(rows, ignore_index=True), pd.DataFrame(runs)


CI_COLUMNS = ["speedup_tpot_lo", "speedup_tpot_hi", "speedup_e2el_lo", "speedup_e2el_hi"]


def test_every_row_has_its_own_generator_so_row_order_leaves_each_ci_alone():
    from specnb.measure.serving_summary import summarise_sweep

    records, runs = sweep_records()
    shuffled = records.sample(frac=1.0, random_state=7)
    tables = [summarise_sweep(r, runs, n_boot=200).set_index(["config", "concurrency"]).sort_index()
              for r in (records, shuffled)]
    assert tables[0][CI_COLUMNS].notna().all().all()
    pd.testing.assert_frame_equal(tables[0][CI_COLUMNS], tables[1][CI_COLUMNS])


def test_a_levels_adaptive_ci_does_not_depend_on_the_other_levels():
    from specnb.measure.serving_checks import adaptive_check
    from specnb.measure.serving_summary import summarise_sweep

    records, runs = sweep_records()
    summary = summarise_sweep(records, runs, n_boot=200)
    both = adaptive_check(summary, records=records, n_boot=200).set_index("concurrency")
    one = adaptive_check(summary[summary["concurrency"] == 4], records=records, n_boot=200).set_index("concurrency")
    # the point and the bootstrap are the level's own; the family (two levels or one) sets c
    assert both.loc[4, "critical"] > one.loc[4, "critical"]
    scale = lambda t, side: abs(np.log(t.loc[4, f"ratio_{side}"] / t.loc[4, "ratio"]))  # noqa: E731
    assert scale(both, "lo") / scale(one, "lo") == pytest.approx(both.loc[4, "critical"] / one.loc[4, "critical"],
                                                                 rel=0.05)


def speedups(rows: dict[str, list[float]], half_width: float = 0.1) -> pd.DataFrame:
    """A summary of TPOT speedups at 1, 2, 4 and 8 concurrent, each CI ± ``half_width``."""
    return pd.DataFrame([{"config": config, "concurrency": level, "speedup_tpot": x,
                          "speedup_tpot_lo": x - half_width, "speedup_tpot_hi": x + half_width}
                         for config, xs in rows.items() for level, x in zip([1, 2, 4, 8], xs)])


def test_a_configuration_stops_paying_only_where_it_does_not_recover():
    from specnb.measure.serving_summary import crossover

    summary = speedups({"dips": [1.4, 0.8, 0.9, 1.3], "starts low": [0.8, 1.2, 1.3, 1.4], "never": [0.9, 0.8, 0.7, 0.5],
                        "stops": [1.3, 0.8, 1.2, 0.7], "always": [1.5, 1.4, 1.3, 1.2]})
    rows = crossover(summary, "speedup_tpot").set_index("config")
    assert rows.loc["dips", "verdict"] == "loses between 2 and 4" and np.isnan(rows.loc["dips", "crossover"])
    assert (rows.loc["dips", "loses_from"], rows.loc["dips", "loses_to"]) == (2, 4)
    assert rows.loc["starts low", "verdict"] == "loses between 1 and 1"
    assert rows.loc["never", "verdict"] == "never pays"
    assert rows.loc["always", "verdict"] == "pays at every level measured"
    # below 1 for good from 8 concurrent: the crossing is the last one, between 4 and 8, not the dip at 2
    assert rows.loc["stops", "verdict"] == "stops paying" and 4 < rows.loc["stops", "crossover"] < 8


def test_the_crossover_row_says_whether_the_end_levels_cis_exclude_1():
    from specnb.measure.serving_summary import crossover

    summary = speedups({"clear": [1.4, 1.3, 1.2, 1.15], "noisy": [1.05, 1.1, 1.0, 1.02]})
    rows = crossover(summary, "speedup_tpot").set_index("config")
    assert rows.loc["clear", ["ci_excludes_1_lowest", "ci_excludes_1_top"]].tolist() == [True, True]
    assert rows.loc["noisy", ["ci_excludes_1_lowest", "ci_excludes_1_top"]].tolist() == [False, False]


def test_the_launch_term_widens_every_speculative_row_at_one_critical_value_and_each_row_says_on_what():
    from specnb.measure.launch_noise import LaunchNoise
    from specnb.measure.serving_checks import adaptive_check, trace_check
    from specnb.measure.serving_summary import summarise_sweep

    records, runs = sweep_records()
    noise = LaunchNoise(sigma=0.05, source="test", pairs=3)
    plain, wide = (summarise_sweep(records, runs, n_boot=200, noise=n)
                   .set_index(["config", "concurrency"]) for n in (None, noise))
    family = wide[wide["ci"] == "simultaneous"]
    assert set(family.index.get_level_values("config")) == {"ngram k=4", "adaptive"}
    assert family["critical"].nunique() == 1 and family["critical"].iloc[0] > plain["critical"].max() > 1.96
    assert (plain["launch_sigma"].dropna() == 0.0).all() and (family["launch_pairs"] == 3).all()
    spec = wide.loc[("ngram k=4", 4)]
    assert spec["launch_sigma"] == 0.05 and spec["speedup_tpot"] == plain.loc[("ngram k=4", 4), "speedup_tpot"]
    assert spec["tpot_log_var"] == pytest.approx(plain.loc[("ngram k=4", 4), "tpot_log_var"])  # the bootstrap's own
    for metric in CI_COLUMNS:
        side = 1 if metric.endswith("_hi") else -1
        assert side * (wide.loc[("ngram k=4", 4), metric] - plain.loc[("ngram k=4", 4), metric]) > 0
    scale = spec["speedup_output_throughput"] / spec["speedup_e2el"]  # throughput's CI is the E2E one, scaled
    assert spec["speedup_output_throughput_lo"] == pytest.approx(spec["speedup_e2el_lo"] * scale)
    assert wide.loc[("spec-off", 4), "launch_sigma"] == 0.0  # one launch against itself
    assert wide.loc[("spec-off", 4), "speedup_tpot_lo"] == plain.loc[("spec-off", 4), "speedup_tpot_lo"]
    # a sweep that relaunched each round averages its rounds' launches: the term is s ÷ √2 for two
    relaunched = summarise_sweep(records.assign(launch=records["round"]), runs, n_boot=200, noise=noise)
    again = relaunched.set_index(["config", "concurrency"]).loc[("ngram k=4", 4)]
    assert again["launches"] == 2 and again["speedup_tpot_lo"] > spec["speedup_tpot_lo"]
    check = [adaptive_check(s.reset_index(), records=records, n_boot=200, noise=n)
             .set_index("concurrency") for s, n in ((plain, None), (wide, noise))]
    assert check[1].loc[4, "ratio_lo"] < check[0].loc[4, "ratio_lo"] and check[1].loc[4, "launch_sigma"] == 0.05
    traces = [trace_check(records, n_boot=200, noise=n).set_index("config") for n in (None, noise)]
    hi = "adaptive_speedup_tpot_hi"
    assert traces[1].loc["ngram k=4", hi] > traces[0].loc["ngram k=4", hi]
    assert traces[1].loc["ngram k=4", "launch_pairs"] == 3 and traces[1].loc["ngram k=4", "critical"] > 1.96


def test_the_twins_row_is_its_raw_bootstrap_ci_never_widened_by_the_noise_measured_from_it():
    from specnb.measure.launch_noise import LaunchNoise
    from specnb.measure.serving_summary import summarise_sweep

    records, runs = sweep_records()
    twin = records[records["config"] == "adaptive"].assign(config="spec-off-aa")
    records = pd.concat([records, twin], ignore_index=True)
    runs = pd.concat([runs, runs[runs["config"] == "adaptive"].assign(config="spec-off-aa")], ignore_index=True)
    plain, wide = (summarise_sweep(records, runs, n_boot=200, noise=n).set_index(["config", "concurrency"])
                   for n in (None, LaunchNoise(sigma=0.05, source="test", pairs=1)))
    row = wide.loc[("spec-off-aa", 4)]
    assert row["ci"] == "raw A/A twin" and row["launch_sigma"] == 0.0 and row["critical"] == pytest.approx(1.959964)
    assert row["speedup_tpot_lo"] == plain.loc[("spec-off-aa", 4), "speedup_tpot_lo"]
    assert wide.loc[("adaptive", 4), "speedup_tpot_lo"] < row["speedup_tpot_lo"]  # the same requests, in the family
