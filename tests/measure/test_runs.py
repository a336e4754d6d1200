"""runs: interleaved records on tiny random models, summaries on synthetic records with known answers."""

import numpy as np
import pandas as pd
import pytest
from helpers import WORDS, perturbed_copy, synthetic, word_pair

from specnb.core.errors import ParameterError
from specnb.measure import runs
from specnb.measure.prompts import as_prompt_frame
from specnb.models.lookup import PromptLookup

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS[:20], size=n)) for n in (6, 9, 7, 12)]
    return pd.DataFrame({"id": ["a", "b", "c", "d"], "category": ["x", "x", "y", "y"], "prompt": texts})


@pytest.fixture(scope="module")
def records(pair, prompts):
    drafts = {"noisy": perturbed_copy(pair.verifier, 0.3, 1), "lookup": PromptLookup()}
    candidates = runs.make_candidates(drafts, gammas=[2, 3])
    return runs.run_interleaved(pair, prompts, candidates, repeats=2, max_new_tokens=12, batch_size=2,
                                 progress=False)


REQUIRED = ["repeat", "prompt_ids", "categories", "candidate", "draft", "gamma", "batch_size", "new_tokens", "wall_ms",
            "prefill_ms", "draft_ms", "verify_ms", "accept_ms", "rollback_ms", "other_ms", "drafted", "accepted",
            "verifier_forwards", "draft_forwards", "accept_lengths", "accepted_by_position", "drafted_by_position"]


def test_records_one_per_repeat_batch_candidate_in_rotated_order(records):
    assert set(REQUIRED) <= set(records.columns)
    assert len(records) == 2 * 2 * 5  # repeats x batches x (baseline + 2 drafts x 2 gammas)
    first = records[(records["repeat"] == 0) & (records["prompt_ids"] == "a,b")]["candidate"].tolist()
    second = records[(records["repeat"] == 1) & (records["prompt_ids"] == "a,b")]["candidate"].tolist()
    assert first[0] == "verifier-only" and second == first[1:] + first[:1]
    assert set(records["prompt_ids"]) == {"a,b", "c,d"} and set(records["categories"]) == {"x", "y"}


def test_record_counts_are_consistent(records):
    stages = records[[f"{s}_ms" for s in ("prefill", "draft", "verify", "accept", "rollback", "other")]].sum(axis=1)
    assert ((stages > 0) & (stages <= records["wall_ms"])).all()  # the timer runs inside the wall time (any load)
    assert (records["new_tokens"] <= 2 * 12).all() and (records["new_tokens"] >= 2).all()
    for _, r in records.iterrows():
        assert len(r.accepted_by_position) == len(r.drafted_by_position) == r.gamma
        assert sum(r.accepted_by_position) == r.accepted == sum(r.accept_lengths) <= r.drafted
        assert sum(r.drafted_by_position) == r.drafted
    base = records[records["candidate"] == "verifier-only"]
    assert (base[["drafted", "accepted", "draft_forwards", "draft_ms"]] == 0).all().all()
    model_draft = records[records["draft"] == "noisy"]
    assert (model_draft["draft_forwards"] > 0).all() and (model_draft["draft_ms"] > 0).all()


def test_summary_of_real_records(records):
    summary = runs.summarise(records, n_boot=200).set_index("candidate")
    assert summary.loc["verifier-only", "speedup"] == pytest.approx(1.0)
    assert summary.loc["verifier-only", "tau"] == pytest.approx(1.0)
    noisy = summary.loc["noisy γ=3"]
    assert 0.0 < noisy["alpha"] < 1.0  # the perturbed draft is neither perfect nor useless
    assert noisy["tau"] == pytest.approx(1 + noisy["alpha"] * records.query("candidate == 'noisy γ=3'")["drafted"].sum()
                                         / records.query("candidate == 'noisy γ=3'")["steps"].sum())
    assert noisy["speedup_lo"] <= noisy["speedup"] <= noisy["speedup_hi"]
    assert (summary["tok_s"] > 0).all() and summary["prompts"].eq(2).all()


def test_summarise_known_speedup_alpha_tau_and_stage_costs():
    frame = pd.DataFrame(synthetic("verifier-only", [10] * 4, [100.0] * 4)
                         + synthetic("d γ=2", [10] * 4, [50.0] * 4, accepted=6, drafted=8, steps=4, gamma=2))
    s = runs.summarise(frame).set_index("candidate")
    assert s.loc["d γ=2", "speedup"] == pytest.approx(2.0)
    assert s.loc["d γ=2", ["speedup_lo", "speedup_hi"]].tolist() == pytest.approx([2.0, 2.0])
    assert s.loc["d γ=2", "alpha"] == pytest.approx(0.75) and s.loc["d γ=2", "tau"] == pytest.approx(2.5)
    assert s.loc["verifier-only", "tok_s"] == pytest.approx(100.0)
    assert s.loc["d γ=2", "verify_ms_per_token"] == pytest.approx(4.5)
    assert np.isnan(s.loc["verifier-only", "alpha"])


def test_speedup_is_paired_by_prompt_and_ci_brackets_it():
    base = synthetic("verifier-only", [10, 10, 10, 10, 10], [100, 100, 100, 100, 100])
    cand = synthetic("d γ=1", [10, 10, 10, 10, 10], [50, 80, 100, 125, 60], accepted=1, drafted=2, gamma=1)
    s = runs.summarise(pd.DataFrame(base + cand), n_boot=500, seed=3).set_index("candidate").loc["d γ=1"]
    assert s["speedup"] == pytest.approx((50 / 415) / (50 / 500))
    assert s["speedup_lo"] < s["speedup"] < s["speedup_hi"]
    with pytest.raises(ParameterError, match="baseline 'nope'"):
        runs.summarise(pd.DataFrame(base + cand), baseline="nope")


def test_per_prompt_speedup_and_alpha():
    frame = pd.DataFrame(synthetic("verifier-only", [10, 10], [100, 100])
                         + synthetic("d γ=1", [10, 10], [50, 200], accepted=1, drafted=4, gamma=1))
    rows = runs.per_prompt(frame)
    assert rows["speedup"].tolist() == pytest.approx([2.0, 0.5]) and rows["alpha"].tolist() == pytest.approx([0.25] * 2)


def test_bad_arguments(pair, prompts):
    with pytest.raises(ParameterError, match="gammas"):
        runs.make_candidates({"x": None}, gammas=[0])
    with pytest.raises(ParameterError, match="no candidates"):
        runs.run_interleaved(pair, prompts, [], progress=False)
    with pytest.raises(ParameterError, match="batch_size"):
        runs.run_interleaved(pair, prompts, runs.make_candidates({}, []), batch_size=0, progress=False)
    with pytest.raises(ParameterError, match="lacks columns"):
        as_prompt_frame(pd.DataFrame({"text": ["a"]}))
    assert as_prompt_frame(["w1 w2", "w3"])["id"].tolist() == ["p00", "p01"]


def test_ragged_costs_count_masked_slots_and_idle_rows():
    # step 0: rows accept 1, 3, 0 -> 2 + 0 + 3 masked slots; step 1: 2, 0, 0 -> 0 + 2 + 2; step 2: two rows left
    costs = runs.ragged_costs([[1, 2, 0], [3, 0], [0, 0, 0]], batch_size=4)
    assert costs == {"ragged_slots": 9, "idle_row_steps": 1 + 1 + 2}
    assert runs.ragged_costs([[2, 1]], batch_size=1) == {"ragged_slots": 0, "idle_row_steps": 0}


def test_tree_candidates_static_and_dynamic_only_for_drafts_that_grow_them(pair):
    from helpers import tiny_model

    from specnb.decode.trees import DynamicTree
    from specnb.models.eagle import EagleConfig, EagleDraft

    eagle = EagleDraft(EagleConfig.from_verifier(tiny_model().config))
    drafts = {"eagle": eagle, "noisy": perturbed_copy(pair.verifier, 0.3, 1), "lookup": PromptLookup()}
    names = {c.name: c for c in runs.make_candidates(drafts, [2], trees=[(3, 2), DynamicTree(4, 3, 8)])}
    assert set(names) == {"verifier-only", "eagle γ=2", "eagle tree=3x2", "eagle tree=dynamic4w3n8", "noisy γ=2",
                          "lookup γ=2"}
    assert names["eagle tree=dynamic4w3n8"].gamma == 4 and names["eagle tree=3x2"].gamma == 2


def test_every_record_and_summary_row_says_which_kernels_each_side_ran(prompts):
    """The baseline's verifier runs the kernels the speculative side's verifier runs, and the tables say so."""
    import copy

    from specnb.models.kernels import use_kernels

    packed = copy.copy(word_pair())
    packed.verifier = use_kernels(copy.deepcopy(packed.verifier), "onednn", spans=((1, 1), (4, 64)))
    drafts = {"noisy": perturbed_copy(word_pair().verifier, 0.3, 1), "lookup": PromptLookup()}
    got = runs.run_interleaved(packed, prompts.iloc[:2], runs.make_candidates(drafts, gammas=[2]), max_new_tokens=4,
                               progress=False, warmup=False)
    assert set(got["verifier_kernels"]) == {"mixed (oneDNN 1 and 4–64 rows)"}
    assert dict(zip(got["candidate"], got["draft_kernels"])) == {"verifier-only": "", "noisy γ=2": "default",
                                                                  "lookup γ=2": ""}
    summary = runs.summarise(got).set_index("candidate")
    assert set(summary["baseline_kernels"]) == set(summary["verifier_kernels"]) == {"mixed (oneDNN 1 and 4–64 rows)"}
    assert set(runs.KERNEL_COLUMNS) <= set(summary.columns)
