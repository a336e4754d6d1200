"""Launch noise, proven on the simulated engine in virtual time (no HTTP): A/A launch pairs of spec-off
read "no measurable difference" under prompt-cluster CIs with the calibrated launch term, and "differ"
under the old (prompt, round) units without it; a real 1.2x gain still pays. Then the pieces: the
widening, the calibration on hand-built pairs, the store per engine and machine, spec-off's twin."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from specnb.core.errors import ParameterError
from specnb.measure.launch_noise import (
    MIN_PAIRS,
    LaunchNoise,
    aa_noise,
    noise_path,
    save_noise,
    stored_noise,
    twin_of,
    widened,
    with_twin,
)
from specnb.measure.runs import bootstrap_speedup
from specnb.measure.serving_summary import decode_timed, paired_requests, speedup_ci
from specnb.serve.engines import AA_TWIN_CONFIG, BASELINE_CONFIG, SPEC_OFF, Speculation
from specnb.serve.simulated import (
    SimConfig,
    SimCost,
    expected_speedup,
    expected_tokens,
    run_closed,
)

PROMPTS, ROUNDS, N_BOOT = 8, 3, 200  # a closed-loop level: 8 prompts, each sent once per round
JITTER = 0.03  # sd of log of one launch's speed factor: an A/A pair's log speedup has sd √2 · 0.03
COST = SimCost(fixed_ms=10.0, per_token_ms=0.5, prefill_per_token_ms=0.2, acceptance=(0.6,),
               prompt_acceptance_spread=0.8, launch_jitter=JITTER, max_num_seqs=16)
PROMPT_LENS, OUTPUT_LENS = [16 + 9 * i for i in range(PROMPTS)], [24 + 5 * i for i in range(PROMPTS)]
NGRAM2 = Speculation(entry="ngram", k=2, method="ngram")
TOTALS = ["decode_tokens", "decode_s", "decode_tokens_base", "decode_s_base"]


def launch(config: str, speculation: Speculation, launch_seed: int, concurrency: int, *, seed: int = 0,
           cost: SimCost = COST, output_lens: list[int] = OUTPUT_LENS, first_round: int = 0,
           launch_id: int = 0) -> pd.DataFrame:
    """One launch of a configuration (one engine speed factor): ROUNDS rounds of the same prompts."""
    launched = replace(cost, launch_seed=launch_seed, seed=seed)
    rows = []
    for r in range(ROUNDS):
        records = run_closed(launched, speculation, PROMPT_LENS, output_lens, concurrency, keys=list(range(PROMPTS)))
        rows += [record | {"config": config, "concurrency": concurrency, "round": first_round + r, "prompt_index": i,
                           "prompt_id": f"p{i}", "launch": launch_id} for i, record in enumerate(records)]
    return pd.DataFrame(rows)


def aa_pair(launch_seed: int, concurrency: int = 4, **where) -> pd.DataFrame:
    """spec-off launched twice: its own launch and its twin's, on the same prompts."""
    return pd.concat([launch(BASELINE_CONFIG, SPEC_OFF, 2 * launch_seed, concurrency, **where),
                      launch(AA_TWIN_CONFIG, SPEC_OFF, 2 * launch_seed + 1, concurrency, **where)])


def paired(records: pd.DataFrame, config: str, over: str) -> pd.DataFrame:
    return paired_requests(decode_timed(records), config, records["concurrency"].iloc[0], over)


def new_ci(pairs: pd.DataFrame, noise: LaunchNoise) -> tuple[float, float, float]:
    return speedup_ci(pairs, "decode_tokens", "decode_s", np.random.default_rng(0), N_BOOT, noise)


def old_ci(pairs: pd.DataFrame) -> tuple[float, float]:
    """What the summaries did before: a (prompt, round) unit, no launch term."""
    frame = pairs[TOTALS].assign(unit=pairs.groupby(["prompt_id", "round"]).ngroup())
    return bootstrap_speedup(frame, np.unique(frame["unit"]), np.random.default_rng(0), N_BOOT, TOTALS, "unit")


@pytest.fixture(scope="module")
def calibrated() -> LaunchNoise:
    """sigma from a separate set of 40 A/A launch pairs, each its own rounds, as a relaunching sweep's."""
    return aa_noise(pd.concat([aa_pair(10_000 + j, first_round=ROUNDS * j, launch_id=j) for j in range(40)]))


def test_the_calibration_bounds_the_aa_spread_the_engine_was_given(calibrated):
    truth = math.sqrt(2) * JITTER  # sd of log(f_a / f_b), two launches' factors
    assert calibrated.pairs == 40 and calibrated.cells == 40  # one level, each pair's rounds pooled
    assert calibrated.sampling_var == pytest.approx(0.0, abs=1e-12)  # spec-off: every prompt scaled alike
    assert truth < calibrated.sigma < 1.5 * truth  # an upper bound, not a wild one


def test_aa_launch_pairs_read_no_difference_with_the_launch_term_and_differ_without_it(calibrated):
    new_holds, old_holds = [], []
    for i in range(200):
        pairs = paired(aa_pair(i), AA_TWIN_CONFIG, BASELINE_CONFIG)
        assert len(pairs) == PROMPTS * ROUNDS
        _, lo, hi = new_ci(pairs, calibrated)
        new_holds.append(lo <= 1.0 <= hi)
        old_lo, old_hi = old_ci(pairs)
        old_holds.append(old_lo <= 1.0 <= old_hi)
    assert np.mean(new_holds) >= 0.95
    assert np.mean(old_holds) <= 0.2  # the launches' own factors, read as a difference


def test_a_real_gain_still_pays_in_most_launches(calibrated):
    # draft cost set so that the truth at batch 1 is 1.2x; prompts a little apart in acceptance, and
    # long enough that each one's own token draws do not swamp it (8 prompts is all the CI has)
    off_ms, k = COST.step_ms(1, 0, 1, 0, False), NGRAM2.k
    cost = replace(COST, prompt_acceptance_spread=0.3,
                   draft_ms=expected_tokens(COST, k) * off_ms / 1.2 - COST.step_ms(1 + k, 0, 1, k, False))
    assert expected_speedup(cost, NGRAM2, 1) == pytest.approx(1.2)
    longer, pays = [64 + 4 * i for i in range(PROMPTS)], []
    for i in range(60):  # each pair another draw of the prompts' acceptance (seed) and of both launches
        records = pd.concat([launch("ngram k=2", NGRAM2, 3 * i, 1, seed=i, cost=cost, output_lens=longer),
                             launch(BASELINE_CONFIG, SPEC_OFF, 3 * i + 1, 1, seed=i, cost=cost, output_lens=longer)])
        _, lo, _ = new_ci(paired(records, "ngram k=2", BASELINE_CONFIG), calibrated)
        pays.append(lo > 1.0)
    assert np.mean(pays) >= 0.7


# ------------------------------------------------------------------ the pieces


def test_the_launch_term_adds_in_log_space_side_by_side_and_nothing_at_zero():
    assert widened(1.2, 1.0, 1.5, 0.0) == (1.0, 1.5)
    lo, hi = widened(1.2, 1.2, 1.2, 0.05)  # no sampling spread: ±1.96 sigma in log
    assert (math.log(1.2 / lo), math.log(hi / 1.2)) == (pytest.approx(1.96 * 0.05, rel=1e-4),) * 2
    lo, hi = widened(1.2, 1.0, 1.5, 0.05)
    se_lo, se_hi = math.log(1.2) / 1.959964, math.log(1.25) / 1.959964
    assert math.log(1.2 / lo) == pytest.approx(1.959964 * math.hypot(se_lo, 0.05))
    assert math.log(hi / 1.2) == pytest.approx(1.959964 * math.hypot(se_hi, 0.05))
    assert all(math.isnan(x) for x in widened(1.2, math.nan, math.nan, 0.05))  # no bootstrap: none made up


def aa_records(ratios: dict[tuple[int, int], float], launches: bool) -> pd.DataFrame:
    """Hand-built A/A pairs: per (round, launch) 4 prompts, the twin's decode ``ratio`` times slower."""
    rows = []
    for (r, launch_id), ratio in ratios.items():
        for p in range(4):
            for config, seconds in ((BASELINE_CONFIG, 1.0), (AA_TWIN_CONFIG, ratio)):
                rows.append({"config": config, "concurrency": 1, "round": r, "prompt_index": p, "success": True,
                             "output_tokens": 11, "ttft": 0.1, "latency": 0.1 + seconds}
                            | ({"launch": launch_id} if launches else {}))
    return pd.DataFrame(rows)


def test_aa_noise_takes_the_mean_square_about_zero_and_bounds_it_by_the_launch_pairs():
    ratios = {(0, 0): math.exp(0.1), (1, 1): math.exp(-0.1), (2, 2): math.exp(0.1)}  # d = ∓0.1 (twin slower: < 1)
    relaunched = aa_noise(aa_records(ratios, launches=True))
    assert relaunched.mean_square == pytest.approx(0.01) and relaunched.sampling_var == pytest.approx(0.0)
    assert (relaunched.pairs, relaunched.cells) == (3, 3)
    assert 0.1 < relaunched.sigma  # an upper bound above every cell's |d|
    one_launch = aa_noise(aa_records(ratios, launches=False))  # no relaunch: the whole sweep one pair, one cell
    pooled_d = math.log((2 * math.exp(0.1) + math.exp(-0.1)) / 3)  # the rounds pooled, as a CI's speedup is
    assert (one_launch.pairs, one_launch.cells) == (1, 1) and one_launch.mean_square == pytest.approx(pooled_d ** 2)
    assert one_launch.sigma == pytest.approx(abs(pooled_d) / 0.253347, rel=1e-4)  # χ²₁ 20%: 0.2533²
    with pytest.raises(ParameterError, match="with_twin"):
        aa_noise(aa_records(ratios, launches=True).query("config == 'spec-off'"))


def test_noise_is_stored_per_engine_and_machine_and_pools_sweep_by_sweep(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECNB_LAUNCH_NOISE")  # the cache's own folder, as a user's run has it
    assert stored_noise("simulated") is None
    first = aa_noise(aa_records({(0, 0): math.exp(0.1)}, launches=True))
    assert save_noise(first, "simulated") == first and stored_noise("simulated") == first
    path = noise_path("simulated")
    assert path.parent == tmp_path / "launch-noise" and path.name.startswith("simulated-")
    pooled = save_noise(aa_noise(aa_records({(0, 0): math.exp(-0.05), (1, 1): 1.0}, launches=True)), "simulated")
    assert (pooled.pairs, pooled.cells) == (3, 3)
    assert pooled.mean_square == pytest.approx((0.01 + 0.0025 + 0.0) / 3) and stored_noise("simulated") == pooled
    assert stored_noise("vllm") is None  # another engine's noise is its own
    monkeypatch.setenv("SPECNB_LAUNCH_NOISE", str(tmp_path / "elsewhere"))
    assert noise_path("simulated").parent == tmp_path / "elsewhere" and stored_noise("simulated") is None


def test_a_sweep_gets_spec_offs_twin_until_the_stored_noise_rests_on_enough_pairs(monkeypatch, tmp_path):
    from specnb.serve.llama import LlamaServerConfig
    from specnb.serve.vllm import VllmConfig

    configs = [SimConfig(speculation=SPEC_OFF, cost=COST), SimConfig(speculation=NGRAM2, cost=COST)]
    twinned = with_twin(configs)
    assert [c.name for c in twinned] == ["spec-off", "ngram k=2", AA_TWIN_CONFIG]
    assert twinned[-1].cost == COST and not twinned[-1].speculative
    for config in (LlamaServerConfig(model="verifier.gguf"), VllmConfig(model="verifier")):  # built, never launched
        twin = twin_of(config)
        assert twin.name == AA_TWIN_CONFIG and not twin.speculative and replace(twin, aa_twin=False) == config
    save_noise(LaunchNoise(sigma=0.05, source="test", pairs=MIN_PAIRS - 1, cells=4, mean_square=0.001), "simulated")
    assert len(with_twin(configs)) == 3  # too few pairs yet
    save_noise(LaunchNoise(sigma=0.05, source="test", pairs=1, cells=1, mean_square=0.001), "simulated")
    assert with_twin(configs) == configs and with_twin(twinned) == twinned
    with pytest.raises(ParameterError, match="spec-off"):
        with_twin(configs[1:])


def test_the_twin_is_never_a_candidate_for_the_policy():
    from specnb.measure.serving_checks import best_static, draft_lengths
    from specnb.predict.noise_aware import round_figures

    rows = ((BASELINE_CONFIG, 1.0, 0), (AA_TWIN_CONFIG, 1.04, 0), ("ngram k=2", 0.9, 2))
    summary = pd.DataFrame([{"config": c, "concurrency": 1, "speedup_tpot": x, "k": k} for c, x, k in rows])
    assert best_static(summary)["config"].tolist() == [BASELINE_CONFIG] and draft_lengths(summary) == {"ngram k=2": 2}
    records = pd.concat([aa_pair(0), launch("ngram k=2", NGRAM2, 99, 4)])
    figures = round_figures(records.assign(success=True))
    assert set(figures["config"]) == {"ngram k=2"}
