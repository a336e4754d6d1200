"""predict/calibrate: cost-model fit, acceptance profiles, prediction vs closed forms,
the recommendation, the hand-entered reference profile, profile JSON, and bad inputs (API and CLI).
Synthetic numbers, plus one end-to-end run on tiny random models."""

import json
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
import torch

from specnb.app.cli import main
from specnb.core import theory
from specnb.core.errors import DeviceError, ParameterError
from specnb.engine.kinds.kind import FORWARDS, PER_STEP
from specnb.measure import acceptance
from specnb.predict import costs, predictor, reference_replay, traces, what_if

DRAFT = "tiny-draft"


def synthetic_profile(t_v=(60.0, 3.0), t_d=(10.0, 1.0), alpha=0.7, prefill=(20.0, 0.5), overhead=(0.5, 1.0),
                      n_new=48) -> costs.HardwareProfile:
    """A profile built from known numbers: linear costs and i.i.d. acceptance α (synthetic traces)."""
    profile = costs.HardwareProfile(
        verifier="tiny",
        device="cpu",
        machine={},
        verifier_decode=costs.CostModel(t0_ms=t_v[0], ms_per_token=t_v[1]),
        verifier_prefill=costs.CostModel(t0_ms=prefill[0], ms_per_token=prefill[1]),
        verifier_flops_per_token=1e9,
        drafts={
            DRAFT: costs.DraftCosts(kind=FORWARDS, decode=costs.CostModel(t0_ms=t_d[0], ms_per_token=t_d[1]),
                                    prefill=costs.CostModel(t0_ms=prefill[0] / 4,
                                                            ms_per_token=prefill[1] / 4), flops_per_token=1e8)
        },
        acceptance={},
        traces={},
        overhead_ms={"verifier-only": overhead[0], DRAFT: overhead[1]},
        max_new_tokens=n_new,
        prompt_tokens=40.0,
    )
    what_if.set_flat_acceptance(profile, DRAFT, alpha, n_new)
    return profile


# ---------------------------------------------------------------------------- cost model


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    n, b = np.meshgrid(np.arange(1, 10), [1, 2, 4])
    true_ms = 42.0 + 3.5 * n * b
    grid = pd.DataFrame(
        {
            "n_tokens": n.ravel(),
            "batch_size": b.ravel(),
            "median_ms": (true_ms * (1 + 0.01 * rng.standard_normal(true_ms.shape))).ravel(),
        }
    )
    fit = costs.fit_cost_model(grid)
    assert fit.t0_ms == pytest.approx(42.0, rel=0.03)
    assert fit.ms_per_token == pytest.approx(3.5, rel=0.03)
    assert fit.r2 > 0.99 and fit.n_points == 27
    measured = grid.set_index(["n_tokens", "batch_size"])["median_ms"]
    assert fit.forward_ms(1, 1) == pytest.approx(measured[(1, 1)])  # the one-token forward as measured
    assert fit.forward_ms(5, 2) == pytest.approx(42.0 + 35.0, rel=0.01)  # the pooled line, not one noisy cell
    assert fit.forward_ms(20, 2) == pytest.approx(42.0 + 140.0, rel=0.03)  # the line extrapolates
    assert fit.forward_ms(5, 3) == pytest.approx(42.0 + 52.5, rel=0.01)  # an unmeasured batch size: by tokens


def test_cost_model_prices_by_tokens_in_all_and_one_slow_cell_moves_little():
    # past the one-token jump, forwards of 2..8 tokens cost alike in whichever rows they sit; one cell
    # timed in a slow spell (b=2, n=1: 130 ms) must not set the price of batch 2's one-token step
    grid = pd.DataFrame({"n_tokens": [1, 2, 4, 1, 2, 4], "batch_size": [1, 1, 1, 2, 2, 2],
                         "median_ms": [60.0, 100, 100, 130, 100, 100]})
    fit = costs.fit_cost_model(grid)
    assert fit.forward_ms(1, 1) == 60.0
    assert fit.forward_ms(1, 2) == pytest.approx(fit.forward_ms(2, 1))  # two tokens in all, either way
    assert fit.forward_ms(1, 2) == pytest.approx(100.0)  # the 130 ms cell is outvoted by the other four


def test_cost_model_keeps_a_jump_the_line_smooths_away():
    # a CPU-like forward: 2 tokens cost 1.7x one (matrix-vector -> matrix-matrix), then ~linear
    grid = pd.DataFrame({"n_tokens": [1, 2, 3, 4, 5], "batch_size": 1, "median_ms": [60.0, 102, 104, 106, 108]})
    fit = costs.fit_cost_model(grid)
    assert fit.forward_ms(np.array([1, 2, 2.5])) == pytest.approx([60.0, 102.0, 103.0])
    assert fit.t0_ms + fit.ms_per_token * 1 > 70  # what the line alone would say for 1 token
    restored = costs.CostModel(**json.loads(json.dumps(asdict(fit))))
    assert restored.forward_ms(2) == pytest.approx(102.0)


def test_fit_needs_two_sizes():
    grid = pd.DataFrame({"n_tokens": [1, 1], "batch_size": [1, 1], "median_ms": [5.0, 6.0]})
    with pytest.raises(ParameterError, match="two sizes"):
        costs.fit_cost_model(grid)


# ---------------------------------------------------------------------------- acceptance


def sample_accept_lengths(profile, steps, rng) -> np.ndarray:
    """Independent Monte Carlo: per step, accept positions in order while a coin with a_i lands."""
    lengths = np.zeros(steps, dtype=int)
    for s in range(steps):
        for a in profile:
            if rng.random() >= a:
                break
            lengths[s] += 1
    return lengths


def test_tokens_per_step_matches_monte_carlo():
    profile = np.array([0.9, 0.7, 0.6, 0.4, 0.3])
    lengths = sample_accept_lengths(profile, 20000, np.random.default_rng(1))
    tau = lengths.mean() + 1
    se = lengths.std() / np.sqrt(len(lengths))
    assert abs(theory.tokens_per_step_from_profile(profile) - tau) < 4 * se


def test_profile_recovered_from_bench_style_records():
    true = [0.85, 0.6, 0.5, 0.3]
    rng = np.random.default_rng(3)
    rows = []
    for prompt in ("p1", "p2", "p3"):
        lengths = sample_accept_lengths(true, 3000, rng)
        rows.append(
            {
                "draft": "d",
                "gamma": 4,
                "prompt_ids": prompt,
                "accepted_by_position": [int((lengths > i).sum()) for i in range(4)],
                "drafted_by_position": [len(lengths)] * 4,
            }
        )
    profile = acceptance.profile_from_records(pd.DataFrame(rows), "d")
    assert profile.gamma == 4 and len(profile.per_prompt) == 3
    reached = np.array(profile.reached)
    se = np.sqrt(np.array(true) * (1 - np.array(true)) / reached)
    assert np.all(np.abs(profile.conditional() - true) < 4 * se)


def test_counts_from_positions_handles_shortened_drafts():
    # 3 steps: accepted 2 of 3, 0 of 3, then a last step that drafted 1 and accepted it
    reached, accepted = acceptance.counts_from_positions([2, 1, 0], [3, 2, 2])
    assert reached == [3, 2, 1] and accepted == [2, 1, 0]


def lookup_profile(runs, proposed, cap=4, step_ms=0.1) -> costs.HardwareProfile:
    """``synthetic_profile`` whose draft is a lookup drafter with the given trace (repeated)."""
    profile = synthetic_profile(overhead=(0.0, 0.0))
    profile.drafts[DRAFT] = costs.DraftCosts(kind=PER_STEP, decode=None, prefill=None, flops_per_token=0.0,
                                             step_ms=step_ms)
    profile.traces[DRAFT] = [traces.AcceptanceTrace(prompt_id=p, runs=list(runs), proposed=list(proposed), cap=cap,
                                                    hit_budget=True) for p in "ab"]
    return profile


def test_proposals_beyond_the_trace_cap_are_flagged():
    profile = lookup_profile([0] + [4] * 47, [0] + [4] * 47)
    pred = predictor.predict(profile, DRAFT, range(1, 7), n_boot=20, sims_per_boot=4)
    assert list(pred.table["extrapolated"]) == [False] * 4 + [True] * 2
    assert pred.notes and "up to 4 tokens" in pred.notes[0]


def test_a_draft_that_proposes_nothing_costs_only_its_bookkeeping():
    """A lookup drafter without matches is verified 1 token at a time: verifier-only plus its host
    time, not the γ + 1-token forward a "k drafts per step" model would charge."""
    profile = lookup_profile([0] * 48, [0] * 48, step_ms=0.0)
    pred = predictor.predict(profile, DRAFT, [4], n_boot=20, sims_per_boot=4)
    assert pred.predicted_speedup == pytest.approx(1.0, abs=1e-9)
    assert pred.table["tokens_per_step"].iloc[0] == pytest.approx(1.0)


# ---------------------------------------------------------------------------- prediction


def test_prediction_agrees_with_leviathan_when_its_assumptions_hold():
    """Free verification, no prefill or overhead, long generation, flat α: the Leviathan formula
    with wall-clock c is exact, so the simulated prediction must match it."""
    alpha, c, t_v = 0.7, 0.2, 50.0
    profile = synthetic_profile(
        t_v=(t_v, 0.0), t_d=(c * t_v, 0.0), prefill=(0.0, 0.0), overhead=(0.0, 0.0), alpha=alpha, n_new=400
    )
    pred = predictor.predict(profile, DRAFT, range(1, 9), n_boot=20, sims_per_boot=4)
    # the draft's catch-up forward is priced as an ordinary one, as Leviathan's γ·c does
    expected = theory.expected_speedup(alpha, np.arange(1, 9), c)
    assert np.allclose(pred.table["predicted_speedup"], expected, rtol=0.02)
    assert np.allclose(pred.table["break_even_alpha"], theory.break_even_alpha(np.arange(1, 9), c), atol=0.02)


def test_recommendation_is_the_argmax():
    pred = predictor.predict(synthetic_profile(), DRAFT, range(1, 9), n_boot=30, sims_per_boot=4)
    table = pred.table
    assert pred.best_gamma == int(table.loc[table["predicted_speedup"].idxmax(), "gamma"])
    assert pred.recommended_gamma == pred.best_gamma and pred.predicted_speedup > 1.0
    assert pred.speedup_lo <= pred.predicted_speedup <= pred.speedup_hi
    assert 0.0 < pred.break_even_alpha < 1.0


def test_no_recommendation_when_nothing_beats_the_verifier():
    slow = synthetic_profile(t_d=(55.0, 3.0), alpha=0.2)
    pred = predictor.predict(slow, DRAFT, range(1, 5), n_boot=30, sims_per_boot=4)
    assert pred.recommended_gamma is None and pred.predicted_speedup <= 1.0
    assert (pred.table["predicted_speedup"] <= 1.0).all()
    data = pred.as_dict()
    assert data["recommended_gamma"] is None and len(data["table"]) == 4


def test_batch_runs_until_the_slowest_row():
    profile = synthetic_profile(t_v=(60.0, 0.0), t_d=(6.0, 0.0), prefill=(0.0, 0.0), overhead=(0.0, 0.0))
    one = predictor.predict(profile, DRAFT, [4], batch_size=1, n_boot=40, sims_per_boot=8)
    four = predictor.predict(profile, DRAFT, [4], batch_size=4, n_boot=40, sims_per_boot=8)
    # costs do not depend on batch here, so only the slowest-row effect lowers the speedup
    assert four.predicted_speedup < one.predicted_speedup


def test_what_if_moves_the_verdict():
    profile = synthetic_profile()
    base = predictor.predict(profile, DRAFT, range(1, 9), n_boot=20, sims_per_boot=4)
    better = what_if.what_if(profile, DRAFT, alpha=0.95)
    faster = what_if.what_if(profile, DRAFT, draft_speed=3.0)
    assert better.predicted_speedup > base.predicted_speedup
    assert faster.predicted_speedup > base.predicted_speedup
    with pytest.raises(ParameterError):
        what_if.what_if(profile, DRAFT, draft_speed=0)


def test_what_if_with_nothing_changed_is_the_prediction():
    """A draft with measured forward times: the what-if at speed 1.0 keeps them, not just the line."""
    profile = synthetic_profile()
    grid = pd.DataFrame({"n_tokens": [1, 2, 1, 2], "batch_size": [1, 1, 2, 2], "median_ms": [9.0, 16.0, 12.0, 18.0]})
    profile.drafts[DRAFT].decode = costs.fit_cost_model(grid)
    base = predictor.predict(profile, DRAFT, range(1, 5), n_boot=40, sims_per_boot=8)
    same = what_if.what_if(profile, DRAFT, gammas=range(1, 5))
    assert same.table["predicted_speedup"].to_numpy() == pytest.approx(base.table["predicted_speedup"].to_numpy())
    decode = profile.drafts[DRAFT].decode
    faster = what_if.scale(decode, 2.0)
    assert faster.forward_ms(np.array([1, 2, 3])) == pytest.approx(decode.forward_ms(np.array([1, 2, 3])) / 2)
    assert decode.forward_ms(1) == 9.0 and decode.forward_ms(2) == pytest.approx(14.0)  # M=2 pooled: 16 and 12


def test_reference_mps_profile_predicts_leviathans_step_arithmetic():
    profile = reference_replay.reference_mps_profile(0.0)
    draft = next(iter(profile.drafts))
    pred = predictor.predict(profile, draft, range(1, 9), n_boot=20, sims_per_boot=4)
    tok_s = pred.table.set_index("gamma")["predicted_tok_s"]
    assert pred.baseline_tok_s == pytest.approx(14.4, rel=0.01)
    # by hand: t_v = 1000/14.4 = 69.44 ms, t_d = t_v/2.8 = 24.80 ms, free verification, flat α = 0.392:
    # a step takes γ·t_d + t_v and yields τ = (1 − α^(γ+1))/(1 − α) tokens; γ = 1: 1.392/94.25 ms = 14.77
    # tok/s, γ = 4: 1.6403/168.65 ms = 9.73 tok/s. The predictor replays 128-token generations, whose
    # last step is cut at the budget, so it sits up to ~1% above the infinite-length formula.
    hand = {1: 14.770, 2: 12.984, 4: 9.662, 8: 6.139}
    for gamma, expected in hand.items():
        assert tok_s[gamma] == pytest.approx(expected, rel=0.03)
    # FLOPs-c reproduces the reference's 0.99x at γ = 4
    assert theory.format_speedup(pred.table.set_index("gamma").loc[4, "flops_leviathan_speedup"]) == "0.99x"
    # costlier verification can only slow speculation down
    costly = predictor.predict(reference_replay.reference_mps_profile(0.2), draft, [4, 7], n_boot=20, sims_per_boot=4)
    assert (costly.table["predicted_tok_s"].to_numpy() < tok_s.loc[[4, 7]].to_numpy()).all()


# ---------------------------------------------------------------------------- JSON and bad input


def test_profile_json_round_trip(tmp_path):
    profile = synthetic_profile()
    path = costs.save_profile(profile, tmp_path / "p.json")
    loaded = costs.load_profile(path)
    assert costs.save_profile(loaded, tmp_path / "again.json").read_text() == path.read_text()
    assert (
        loaded.verifier_decode.t0_ms == 60.0 and loaded.acceptance[DRAFT].reached == profile.acceptance[DRAFT].reached
    )
    assert loaded.traces[DRAFT] == profile.traces[DRAFT]


@pytest.mark.parametrize(
    "text,match",
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "malformed"),
        ('{"format": "specnb-hardware-profile/2"}', "malformed"),
        ('{"format": "specnb-hardware-profile/1"}', "malformed"),
    ],
)
def test_malformed_profile_is_a_clear_error(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ParameterError, match=match):
        costs.load_profile(path)


def test_bad_arguments():
    profile = synthetic_profile()
    with pytest.raises(ParameterError, match="gamma"):
        predictor.predict(profile, DRAFT, [0, 1])
    with pytest.raises(ParameterError, match="no calibration for draft"):
        predictor.predict(profile, "other", [1])
    with pytest.raises(ParameterError, match="batch_size"):
        predictor.predict(profile, DRAFT, [1], batch_size=0)


def run_cli(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_predict_from_profile_json(tmp_path, capsys):
    path = costs.save_profile(synthetic_profile(), tmp_path / "p.json")
    code, out, err = run_cli(
        ["predict", "--verifier", "tiny", "--draft", DRAFT, "--profile", str(path), "--gamma", "3", "--json"], capsys
    )
    assert code == 0, err
    data = json.loads(out)
    assert {"recommended_gamma", "predicted_speedup", "break_even_alpha", "table"} <= set(data)
    assert [row["gamma"] for row in data["table"]] == list(range(1, 9))
    assert data["gamma_speedup"]["gamma"] == 3
    code, out, _ = run_cli(["predict", "--verifier", "tiny", "--draft", DRAFT, "--profile", str(path)], capsys)
    assert code == 0 and "break_even_alpha" in out and "predicted_speedup" in out


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--max-gamma", "0"], "gamma must be >= 1"),
        (["--gamma", "0"], "gamma must be >= 1"),
        (["--prompts", "does/not/exist.txt"], "does not exist"),
        (["--device", "mps"], "device"),
    ],
)
def test_cli_bad_inputs_exit_2(tmp_path, capsys, extra, match):
    path = costs.save_profile(synthetic_profile(), tmp_path / "p.json")
    code, out, err = run_cli(
        ["predict", "--verifier", "tiny", "--draft", DRAFT, "--profile", str(path), *extra], capsys
    )
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and match in err


def test_cli_unparseable_prompt_file_and_profile(tmp_path, capsys):
    bad = tmp_path / "prompts.txt"
    bad.write_bytes(b"\xff\xfe\x00broken")
    code, _, err = run_cli(["predict", "--draft", DRAFT, "--prompts", str(bad)], capsys)
    assert code == 2 and "not UTF-8" in err
    broken = tmp_path / "p.json"
    broken.write_text("[1, 2")
    code, _, err = run_cli(["predict", "--draft", DRAFT, "--profile", str(broken)], capsys)
    assert code == 2 and "not valid JSON" in err


def test_calibrate_stores_a_profile_on_20_prompts_and_predict_keeps_a_profiles_traces(monkeypatch, capsys):
    """`calibrate` (once, stored) defaults to 20 prompts over every category; `predict` without
    --prompts/--n-prompts passes None, so a profile's traces are reused rather than re-measured."""
    from specnb.predict import calibrate as C

    seen = {}

    def stop_as(key):
        def stop(*args, **kwargs):
            seen[key] = kwargs["prompts"]
            raise ParameterError("stopped before measuring")

        return stop

    monkeypatch.setattr(C, "calibrate", stop_as("calibrate"))
    monkeypatch.setattr(C, "ensure_calibrated", stop_as("predict"))
    assert run_cli(["calibrate", "--draft", DRAFT, "--out", "unused.json"], capsys)[0] == 2
    assert len(seen["calibrate"]) == 20 and seen["calibrate"]["category"].nunique() == 8
    assert run_cli(["predict", "--draft", DRAFT], capsys)[0] == 2 and seen["predict"] is None
    seen.clear()
    assert run_cli(["predict", "--draft", DRAFT, "--n-prompts", "5"], capsys)[0] == 2 and len(seen["predict"]) == 5


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_calibrate_on_a_missing_device(tmp_path, capsys):
    from specnb.predict.calibrate import calibrate

    with pytest.raises(DeviceError):
        calibrate("smollm2-135m", ["prompt-lookup"], device="cuda")
    code, _, err = run_cli(
        ["calibrate", "--draft", "prompt-lookup", "--device", "cuda", "--out", str(tmp_path / "p.json")], capsys
    )
    assert code == 2 and "not available" in err and len(err.strip().splitlines()) == 1


def test_calibration_and_validation_prompts_are_disjoint_and_share_categories():
    from specnb.measure.prompts import split_prompts

    calibration, validation = split_prompts("all", 4, 4)
    assert not set(calibration["id"]) & set(validation["id"])
    assert list(calibration["category"]) == list(validation["category"])
    calibration, validation = split_prompts("all", 8, 4)  # more calibration prompts: the same 4 categories, twice
    assert sorted(calibration["category"]) == sorted(list(validation["category"]) * 2)
    calibration, _ = split_prompts("all", 8, 0)  # calibration alone: every category
    assert calibration["category"].nunique() == 8
    with pytest.raises(ParameterError, match="need 9 \\+ 1"):
        split_prompts("code", 9, 1)


@pytest.mark.usefixtures("one_thread")
def test_calibrate_and_validate_end_to_end_on_tiny_models(tmp_path):
    """Calibration on tiny random models, with every kind of draft: the replayed traces take the steps
    the engine took, the profile survives JSON, and validation sets a prediction beside every measured
    grid point."""
    from helpers import perturbed_copy, tiny_tokenizer, word_model

    from specnb.models.eagle import EagleConfig, EagleDraft
    from specnb.models.load import Pair
    from specnb.models.lookup import PromptLookup
    from specnb.models.medusa import MedusaConfig, MedusaHeads
    from specnb.predict.calibrate import calibrate, replay_check
    from specnb.predict.validate import validate, validation_summary

    pair = Pair(verifier=word_model(0), tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32,
                verifier_name="tiny")
    torch.manual_seed(0)
    eagle = EagleDraft(EagleConfig.from_verifier(pair.verifier.config)).eval().attach(pair.verifier)
    medusa = MedusaHeads(MedusaConfig(hidden_size=64, num_heads=4, vocab_size=63)).eval().attach(pair.verifier)
    drafts = {"noisy": perturbed_copy(pair.verifier, 0.3, 1), "lookup": PromptLookup(), "eagle": eagle,
              "medusa": medusa}
    texts = ["w1 w2 w3 w1 w2 w3 w1", "w4 w5 w6 w7 w4 w5", "w8 w9 w8 w9 w8", "w2 w4 w6 w8 w2 w4"]
    profile, records = calibrate(
        "tiny",
        drafts,
        loaded=(pair, drafts),
        prompts=texts[:3],
        gamma=4,
        max_new_tokens=12,
        batch_sizes=(1, 2),
        repeats=2,
        progress=False,
    )
    assert set(profile.traces) == set(drafts) and all(len(t) == 3 for t in profile.traces.values())
    decode = pd.DataFrame(profile.grid).query("kind == 'decode'")
    widest = {"tiny": 5, "noisy": 2, "eagle": 4}  # γ+1; a model draft 1..2; EAGLE's catch-up 1, 2, 4
    assert decode.groupby("model")["n_tokens"].max().to_dict() == widest
    assert {name: cost.kind for name, cost in profile.drafts.items()} == {
        "noisy": "forwards", "lookup": "per_step", "eagle": "forwards", "medusa": "per_token"}
    assert profile.drafts["medusa"].step_ms > 0 and profile.drafts["eagle"].catch_up == "features"
    check = replay_check(profile, records)
    assert len(check) == 4 * 2 and check["identical"].all()  # 4 drafts x the 2 overhead prompts
    loaded = costs.load_profile(costs.save_profile(profile, tmp_path / "p.json"))
    assert loaded.traces == profile.traces
    _, table = validate(
        profile, (pair, drafts), texts[3:] * 2, gammas=(1, 3), batch_sizes=(1, 2), max_new_tokens=12, progress=False
    )
    assert len(table) == 4 * 2 * 2 and table["predicted_speedup"].gt(0).all()
    booted = table.dropna(subset=["bootstrap_lo"])  # batch 2 has one prompt batch: nothing to resample
    assert len(booted) == 8 and table["measured_lo"].notna().all()  # the pooled interval covers it
    assert (booted["measured_lo"] <= booted["bootstrap_lo"]).all()
    assert (booted["measured_hi"] >= booted["bootstrap_hi"]).all()
    assert (table["units"] == 2).all() and table["units_needed"].ge(2).all()  # 2 prompts at batch 1, 1 batch x 2 at 2
    assert validation_summary(table)["grid_points"] == 16


def test_a_gain_inside_the_band_is_not_recommended():
    """One calibration prompt the draft gets all right, one it gets all wrong: on average speculation
    wins, but a bootstrap set of the bad prompt loses, so the band reaches below 1.0x: no
    recommendation, and a note saying why."""
    profile = synthetic_profile(t_v=(60.0, 0.0), t_d=(2.0, 0.0), prefill=(0.0, 0.0), overhead=(0.0, 0.0), n_new=40)
    profile.traces[DRAFT] = [
        traces.AcceptanceTrace(prompt_id="good", runs=[40] * 40, proposed=None, cap=None, hit_budget=True),
        traces.AcceptanceTrace(prompt_id="bad", runs=[0] * 40, proposed=None, cap=None, hit_budget=True),
    ]
    pred = predictor.predict(profile, DRAFT, [4], n_boot=100, sims_per_boot=4)
    assert pred.predicted_speedup > 1.3 and pred.speedup_lo < 1.0
    assert pred.best_gamma == 4 and pred.recommended_gamma is None
    assert any("not recommended" in note for note in pred.notes)
    assert (
        predictor.clears_break_even(1.01, 1.02)
        and not predictor.clears_break_even(1.01, 0.97)
        and not predictor.clears_break_even(0.9, 0.8)
    )


def hand_validation_table() -> pd.DataFrame:
    """Four measured points with their CIs, errors worked out by hand: (predicted − measured) ÷ measured."""
    from specnb.predict.validate import add_errors

    rows = [  # draft, γ, predicted, band lo, band hi, measured, its CI, FLOPs-c Leviathan, wall-clock Leviathan
        ("a", 1, 1.20, 1.05, 1.30, 1.00, 0.95, 1.05, 1.50, 1.10),  # error +0.20, 0.15 beyond the CI; recommended
        ("a", 2, 1.10, 1.02, 1.20, 1.10, 1.00, 1.20, 0.77, 1.21),  # error 0, inside
        ("b", 1, 0.90, 0.80, 0.95, 0.90, 0.85, 0.95, 0.99, 0.99),  # error 0, inside
        ("b", 2, 0.95, 0.85, 1.05, 1.20, 1.10, 1.30, 1.68, 1.32),  # error −0.2083, 0.125 beyond; best measured
    ]
    table = pd.DataFrame(rows, columns=["draft", "gamma", "predicted_speedup", "predicted_lo", "predicted_hi",
                                        "measured_speedup", "measured_lo", "measured_hi", "flops_leviathan_speedup",
                                        "wallclock_leviathan_speedup"])
    return add_errors(table.assign(batch_size=1, units=4, units_needed=17))


def test_validation_summary_on_a_hand_worked_table():
    from specnb.predict.validate import validation_summary

    summary = validation_summary(hand_validation_table())
    assert summary["grid_points"] == 4
    assert summary["median_abs_error"] == pytest.approx(0.10)  # |errors| 0, 0, 0.20, 0.2083: median (0 + 0.20)/2
    assert summary["max_abs_error"] == pytest.approx(0.25 / 1.2)
    assert summary["flops_leviathan_median_abs_error"] == pytest.approx((0.3 + 0.4) / 2)  # 0.5, 0.3, 0.1, 0.4
    assert summary["wallclock_leviathan_median_abs_error"] == pytest.approx(0.1)  # 0.1, 0.1, 0.1, 0.1
    assert summary["within_band"] == pytest.approx(0.5)  # a γ=2 and b γ=1
    assert summary["ci_overlaps_band"] == pytest.approx(0.75)  # all but b γ=2 ([1.10, 1.30] vs [0.85, 1.05])
    assert summary["within_ci"] == pytest.approx(0.5)
    assert summary["median_error_beyond_ci"] == pytest.approx((0 + 0.125) / 2)  # 0, 0, 0.15, 0.15/1.2
    assert summary["median_ci_half_width"] == pytest.approx((0.05 / 0.9 + 0.1 / 1.2) / 2)
    assert summary["points_sized"] == "0/4"
    assert summary["error_verdict"] == "met" and summary["target_error_met"] is True  # 0.10 ≤ 0.10
    assert summary["recommendations_within_5pct"] == "0/3" and summary["target_recommendation_met"] is False
    assert summary["recommendations_wrong"] == "2/3" and summary["recommendation_verdict"] == "missed"
    assert summary["recommendation_worst_ratio"] == pytest.approx(1.0 / 1.2)


def test_recommendation_check_on_a_hand_worked_table():
    from specnb.predict.validate import recommendation_check

    checks = recommendation_check(hand_validation_table()).set_index("draft")
    # a: a γ=1 is predicted best and its band clears 1.0 -> recommended, measured 1.00 against a γ=2's 1.10
    assert checks.loc["a", "recommended"] == "a γ=1"
    assert checks.loc["a", "ratio_to_best"] == pytest.approx(1.0 / 1.1) and not checks.loc["a", "within_5pct"]
    assert not checks.loc["a", "wrong"]  # a γ=2's CI [1.00, 1.20] overlaps a γ=1's [0.95, 1.05]: within noise
    # b: the best prediction (0.95) loses -> verifier-only, worth 1.0x, against b γ=2's measured 1.20
    assert pd.isna(checks.loc["b", "recommended"]) and checks.loc["b", "recommended_measured_speedup"] == 1.0
    assert checks.loc["b", "best_measured"] == "b γ=2" and checks.loc["b", "ratio_to_best"] == pytest.approx(1 / 1.2)
    assert checks.loc["b", "wrong"]  # b γ=2's CI starts at 1.10, above verifier-only's exact 1.0
    # any draft: a γ=1 again (highest prediction overall), best measured b γ=2
    assert checks.loc["any", "recommended"] == "a γ=1" and checks.loc["any", "best_measured"] == "b γ=2"
    # when nothing measured beats 1.0x, verifier-only is the best option and declining is within 5%
    losing = hand_validation_table().query("draft == 'b' and gamma == 1")
    check = recommendation_check(losing).iloc[0]
    assert check["recommended"] is None and check["best_measured"] == "verifier-only" and check["within_5pct"]
