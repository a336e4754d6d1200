"""bench: interleaved records on tiny random models, summaries on synthetic records with known answers."""

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specnb.app import defaults
from specnb.core.errors import ParameterError
from specnb.measure import acceptance, analysis, forward, runs
from specnb.measure.prompts import as_prompt_frame
from specnb.models import load, registry
from specnb.models.load import Pair
from specnb.models.lookup import PromptLookup

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = [f"w{i}" for i in range(60)]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "<eos>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


def tiny_llama(seed: int, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=len(WORDS) + 3, max_position_embeddings=256,
                         eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked logits: argmax ties would make acceptance arbitrary
    return model


def perturbed_copy(model, scale: float, seed: int) -> LlamaForCausalLM:
    """A draft that agrees with the verifier often but not always."""
    torch.manual_seed(seed)
    draft = LlamaForCausalLM(model.config).eval()
    draft.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn_like(p))
    return draft



@pytest.fixture(scope="module")
def pair():
    verifier = tiny_llama(0)
    return Pair(verifier, None, tiny_tokenizer(), torch.device("cpu"), torch.float32, None, "tiny", None)


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
    assert np.allclose(stages, records["wall_ms"], rtol=0.02)
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


def synthetic(candidate, tokens, walls, accepted=0, drafted=0, steps=1, gamma=0):
    return [{"repeat": 0, "prompt_ids": f"p{i}", "categories": "c", "candidate": candidate, "draft": "", "gamma": gamma,
             "batch_size": 1, "new_tokens": t, "wall_ms": w, "prefill_ms": 0.1 * w, "draft_ms": 0.0,
             "verify_ms": 0.9 * w, "accept_ms": 0.0, "rollback_ms": 0.0, "other_ms": 0.0, "accepted": accepted,
             "drafted": drafted, "steps": steps, "verifier_forwards": steps, "draft_forwards": 0,
             "accept_lengths": [], "accepted_by_position": [], "drafted_by_position": []}
            for i, (t, w) in enumerate(zip(tokens, walls))]


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


def test_acceptance_profile_conditional_rates():
    rec = synthetic("d γ=3", [4], [10.0], accepted=5, drafted=9, steps=3, gamma=3)[0]
    rec.update(draft="d", accept_lengths=[3, 2, 0], accepted_by_position=[2, 2, 1], drafted_by_position=[3, 3, 3])
    prof = acceptance.profile_from_records(pd.DataFrame([rec]), "d").to_frame()
    assert prof["rate"].tolist() == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    assert prof["conditional_rate"].tolist() == pytest.approx([2 / 3, 1.0, 0.5])


def test_per_prompt_speedup_and_alpha():
    frame = pd.DataFrame(synthetic("verifier-only", [10, 10], [100, 100])
                         + synthetic("d γ=1", [10, 10], [50, 200], accepted=1, drafted=4, gamma=1))
    rows = runs.per_prompt(frame)
    assert rows["speedup"].tolist() == pytest.approx([2.0, 0.5]) and rows["alpha"].tolist() == pytest.approx([0.25] * 2)


def test_fit_dispatch_recovers_known_line_and_wall_clock_c():
    grid = pd.DataFrame([{"model": m, "n_tokens": n, "batch_size": 1, "median_ms": 5.0 + 2.0 * f * n / 1e9}
                         for m, f in (("big", 6e9), ("small", 1e9)) for n in (1, 4, 16)])
    fit = forward.fit_dispatch(grid, {"big": 6e9, "small": 1e9})
    assert fit.t0_ms == pytest.approx(5.0) and fit.ms_per_gflop == pytest.approx(2.0) and fit.r2 == pytest.approx(1.0)
    assert fit.predict_ms(1e9) == pytest.approx(7.0)
    assert forward.wall_clock_c(grid, "small", "big") == pytest.approx(7.0 / 17.0)  # not the FLOPs ratio 1/6
    with pytest.raises(ParameterError, match="no FLOPs/token"):
        forward.fit_dispatch(grid, {"big": 6e9})
    with pytest.raises(ParameterError, match="two different sizes"):
        forward.fit_dispatch(grid[grid["n_tokens"] == 1].head(1), 1e9)


def test_measure_forward_grid_on_a_tiny_model(pair):
    grid = forward.measure_forward_grid(pair.verifier, n_tokens=(1, 4), batch_sizes=(1, 2), context_len=8, repeats=2,
                                      name="tiny")
    assert grid[["n_tokens", "batch_size"]].values.tolist() == [[1, 1], [4, 1], [1, 2], [4, 2]]
    assert (grid["median_ms"] > 0).all() and grid["samples_ms"].map(len).eq(2).all()
    assert set(grid["model"]) == {"tiny"} and (grid["context_len"] == 8).all()


def test_forward_grids_interleave_models_and_batch_sizes_and_keep_the_loops_logits(pair):
    """Every shape of every model at every batch size in turn, each repeat: a draft's forward is
    timed after the verifier's, as in the loop, a slow spell cannot land on one batch size alone,
    and each forward asks for the logits the loop asks for (keep=1: the last only). One context
    prefill per model and batch size: the shapes share its cache."""
    draft = perturbed_copy(pair.verifier, 0.1, 3)
    calls = []
    for name, model in (("v", pair.verifier), ("d", draft)):
        model.register_forward_hook(lambda m, args, kwargs, out, name=name: calls.append(
            (name, *kwargs["input_ids"].shape, out.logits.shape[1])), with_kwargs=True)
    shapes = [forward.GridShapes("v", pair.verifier, (1, 3)), forward.GridShapes("d", draft, (1, 2), keep=1)]
    grid = forward.measure_forward_grids(shapes, batch_sizes=(1, 2), context_len=5, repeats=2, warmup=1)
    assert grid[["model", "n_tokens", "batch_size"]].values.tolist() == [
        ["v", 1, 1], ["v", 3, 1], ["d", 1, 1], ["d", 2, 1], ["v", 1, 2], ["v", 3, 2], ["d", 1, 2], ["d", 2, 2]]
    prefills = [c for c in calls if c[2] == 5]
    assert prefills == [("v", 1, 5, 5), ("d", 1, 5, 5), ("v", 2, 5, 5), ("d", 2, 5, 5)]
    timed = [c for c in calls if c[2] != 5]  # (model, batch, tokens, logit columns)
    one_round = [(m, b, n, cols) for b in (1, 2) for m, n, cols in (("v", 1, 1), ("v", 3, 3), ("d", 1, 1), ("d", 2, 1))]
    assert timed == one_round * 3  # warmup + 2 repeats, interleaved
    assert (grid["context_len"] == 5).all()


def test_forward_probe_shares_a_cache_only_with_its_own_model_and_batch(pair):
    base = forward.ForwardProbe(pair.verifier, 1, 2, context_len=5)
    shared = forward.ForwardProbe(pair.verifier, 3, 2, context_len=5, share=base)
    assert shared.cache is base.cache
    before = base.cache.get_seq_length()
    assert shared.time_ms() > 0 and base.time_ms() > 0 and base.cache.get_seq_length() == before == 5
    with pytest.raises(ParameterError, match="same model, batch"):
        forward.ForwardProbe(pair.verifier, 1, 1, context_len=5, share=base)


def test_load_drafts_loads_verifier_once_and_each_draft(pair, tmp_path, monkeypatch):
    verifier, folder = tmp_path / "verifier", tmp_path / "draft"
    for model, where in ((pair.verifier, verifier), (perturbed_copy(pair.verifier, 0.1, 2), folder)):
        model.save_pretrained(where)
        pair.tokenizer.save_pretrained(where)
    loaded, real = [], load.load_weights
    monkeypatch.setattr(load, "load_weights", lambda source, *a: loaded.append(source.name) or real(source, *a))
    got, drafts = load.load_drafts(str(verifier), ["prompt-lookup", "exit:1", str(folder), "prompt-lookup"], "cpu")
    assert loaded == [str(verifier), str(folder)] and list(drafts) == ["prompt-lookup", "exit:1", str(folder)]
    assert isinstance(drafts["prompt-lookup"], PromptLookup)
    assert drafts["exit:1"].config.num_hidden_layers == 1
    assert drafts["exit:1"].model.layers[0] is got.verifier.model.layers[0]  # shared, not copied
    assert isinstance(drafts[str(folder)], LlamaForCausalLM)
    with pytest.raises(ParameterError, match="exit:K"):
        load.load_drafts(str(verifier), ["exit:four"], "cpu")


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


def test_flops_table_reproduces_reference_ratios_and_handles_every_draft_kind():
    ref = registry.flops_table("Qwen/Qwen2.5-3B-Instruct", ["Qwen/Qwen2.5-0.5B-Instruct"], context=0).set_index("model")
    assert ref.loc["Qwen/Qwen2.5-3B-Instruct", "flops_per_token"] == 6_171_394_048
    assert round(ref.loc["Qwen/Qwen2.5-0.5B-Instruct", "c_flops"], 4) == 0.1601
    ours = registry.flops_table("smollm2-135m", ["exit:4", "smollm2-exit-12", "prompt-lookup"], context=128)
    ours = ours.set_index("model")
    assert ours.loc["exit:4", "layers"] == 4 and ours.loc["smollm2-exit-12", "layers"] == 12
    assert ours.loc["prompt-lookup", "flops_per_token"] == 0
    # the shared lm_head keeps a 4-of-30-layer exit well above 4/30 of the verifier's FLOPs
    assert 4 / 30 < ours.loc["exit:4", "c_flops"] < ours.loc["smollm2-exit-12", "c_flops"] < 1
    assert (ours["flops_at_context"] > ours["flops_per_token"]).sum() == 3  # attention over 128 cached tokens


def test_wall_clock_costs_from_records():
    base = synthetic("verifier-only", [10], [100.0], steps=0)
    base[0].update(verifier_forwards=10, verify_ms=90.0)  # 9 decoding steps after prefill: 10 ms each
    cand = synthetic("d γ=2", [10], [100.0], accepted=4, drafted=8, steps=4, gamma=2)
    cand[0].update(draft_ms=16.0, verify_ms=60.0)
    cost = analysis.wall_clock_costs(pd.DataFrame(base + cand)).iloc[0]
    assert cost["draft_ms_per_drafted_token"] == pytest.approx(2.0)
    assert cost["verify_ms_per_step"] == pytest.approx(15.0)
    assert cost["c_wall"] == pytest.approx(0.2)


def test_best_per_draft_and_simulated_runs():
    summary = pd.DataFrame(
        {
            "draft": ["", "a", "a", "b"],
            "gamma": [0, 1, 2, 1],
            "batch_size": 1,
            "speedup": [1.0, 1.1, 1.3, 0.8],
            "candidate": ["v", "a γ=1", "a γ=2", "b γ=1"],
        }
    )
    assert analysis.best_per_draft(summary)["candidate"].tolist() == ["a γ=2", "b γ=1"]
    frame = pd.DataFrame(
        synthetic("verifier-only", [10] * 4, [100] * 4)
        + synthetic("d γ=1", [10] * 4, [50, 50, 200, 200], accepted=1, drafted=4, gamma=1)
    )
    frame.loc[4, "accepted"] = 4  # one prompt accepts everything
    short = analysis.simulate_runs(runs.per_prompt(frame), run_size=2, n_runs=200, seed=1)
    assert len(short) == 200 and set(short["prompts"]) == {2}
    assert short["alpha"].min() == pytest.approx(2 / 8) and short["alpha"].max() == pytest.approx(5 / 8)
    assert set(short["speedup"].round(6)) <= {2.0, 0.5, round(20 / 250 / (20 / 200), 6)}


def smollm2_shaped(layers: int) -> dict:
    """A committed draft's config.json with SmolLM2's widths and ``layers`` layers."""
    return {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": layers, "num_attention_heads": 9,
            "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
            "architectures": ["LlamaForCausalLM"]}


def test_default_draft_prefers_best_predicted_and_falls_back(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr("specnb.core.paths.DRAFTS_DIR", tmp_path)
    with pytest.raises(ParameterError, match="no default draft"):
        defaults.default_draft("Qwen/Qwen2.5-3B-Instruct")
    assert defaults.default_draft("smollm2-135m") == "smollm2-exit-4"  # nothing committed
    for name, layers, agreement in (("d-cheap", 1, 0.6), ("d-deep", 8, 0.65)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(smollm2_shaped(layers)))
        (tmp_path / name / "meta.json").write_text(json.dumps({"heldout_top1_agreement": {"after": agreement}}))
    assert defaults.default_draft("smollm2-135m") == "d-cheap"  # slightly lower α, far cheaper


def test_notebook_drafts_named_listed_embedded_and_foreign_verifier(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr("specnb.core.paths.DRAFTS_DIR", tmp_path)
    assert defaults.notebook_drafts("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", ["x"]) == [
        "Qwen/Qwen2.5-0.5B-Instruct"
    ]
    assert defaults.notebook_drafts("smollm2-135m", None, "smollm2-exit-4") == ["smollm2-exit-4"]
    with pytest.raises(ParameterError, match="no default draft"):  # never SmolLM2 drafts for another verifier
        defaults.notebook_drafts("Qwen/Qwen2.5-3B-Instruct")
    assert defaults.notebook_drafts("smollm2-135m", kinds=("exits", "lookup")) == [
        *registry.EMBEDDED_EXITS,
        "prompt-lookup",
    ]
    for name, layers in (("d-big", 8), ("d-small", 2)):  # alphabetical order is not cost order
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(smollm2_shaped(layers)))
    assert defaults.notebook_drafts("smollm2-135m", kinds=("distilled", "lookup")) == [
        "d-small",
        "d-big",
        "prompt-lookup",
    ]
    for name, kind in (("h-medusa", "medusa"), ("h-eagle", "eagle")):  # heads are not distilled drafts
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"kind": kind, "hidden_size": 576}))
    assert defaults.notebook_drafts("smollm2-135m", kinds=("distilled", "heads")) == [
        "d-small",
        "d-big",
        "h-eagle",
        "h-medusa",
    ]
    with pytest.raises(ParameterError, match="unknown draft kinds"):
        defaults.notebook_drafts("smollm2-135m", kinds=("exit",))


def test_smaller_vs_faster_follows_the_dispatch_line():
    fit = forward.DispatchFit(t0_ms=5.0, ms_per_gflop=2.0, r2=1.0, n_points=6)
    curve = forward.smaller_vs_faster(fit, 6e9, factors=[1, 6, 1e6])
    assert curve["times_faster"].tolist() == pytest.approx([1.0, 17.0 / 7.0, 17.0 / 5.0], rel=1e-4)  # → 1 + kF/t0
    no_dispatch = forward.smaller_vs_faster(forward.DispatchFit(0.0, 2.0, 1.0, 6), 6e9, factors=[6])
    assert no_dispatch["times_faster"].iloc[0] == pytest.approx(6.0)
    with pytest.raises(ParameterError, match="positive"):
        forward.smaller_vs_faster(fit, 6e9, factors=[0])
