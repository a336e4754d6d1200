"""forward: the per-forward microbenchmarks (grids of shapes, interleaved, sharing a context
prefill), the dispatch line and what it says of smaller against faster drafts."""

import pandas as pd
import pytest
from helpers import perturbed_copy, tiny_model

from specnb.core.errors import ParameterError
from specnb.measure import forward
from specnb.measure.forward import ForwardShape, TimingPlan, measure_forward_ms

pytestmark = pytest.mark.usefixtures("one_thread")


def test_measure_forward_ms_on_tiny_model():
    model = tiny_model(vocab=100)
    t = measure_forward_ms(model, ForwardShape(n_tokens=3, batch_size=2, context_len=16),
                           TimingPlan(repeats=3, warmup=1))
    assert t.n_tokens == 3 and t.batch_size == 2 and t.context_len == 16
    assert len(t.samples_ms) == 3 and t.median_ms > 0


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
    grid = forward.measure_forward_grid(pair.verifier, n_tokens=(1, 4), batch_sizes=(1, 2), context_len=8,
                                        name="tiny", timing=forward.TimingPlan(repeats=2))
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
    shapes = [forward.GridShapes(name="v", model=pair.verifier, n_tokens=(1, 3)),
              forward.GridShapes(name="d", model=draft, n_tokens=(1, 2), keep=1)]
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
    base = forward.ForwardProbe(pair.verifier, forward.ForwardShape(n_tokens=1, batch_size=2, context_len=5))
    shared = forward.ForwardProbe(pair.verifier, forward.ForwardShape(n_tokens=3, batch_size=2, context_len=5),
                                  share=base)
    assert shared.cache is base.cache
    before = base.cache.get_seq_length()
    assert shared.time_ms() > 0 and base.time_ms() > 0 and base.cache.get_seq_length() == before == 5
    with pytest.raises(ParameterError, match="same model, batch"):
        forward.ForwardProbe(pair.verifier, forward.ForwardShape(n_tokens=1, batch_size=1, context_len=5), share=base)


def test_smaller_vs_faster_follows_the_dispatch_line():
    fit = forward.DispatchFit(t0_ms=5.0, ms_per_gflop=2.0, r2=1.0, n_points=6)
    curve = forward.smaller_vs_faster(fit, 6e9, factors=[1, 6, 1e6])
    assert curve["times_faster"].tolist() == pytest.approx([1.0, 17.0 / 7.0, 17.0 / 5.0], rel=1e-4)  # → 1 + kF/t0
    no_dispatch = forward.smaller_vs_faster(forward.DispatchFit(t0_ms=0.0, ms_per_gflop=2.0, r2=1.0, n_points=6), 6e9,
                                            factors=[6])
    assert no_dispatch["times_faster"].iloc[0] == pytest.approx(6.0)
    with pytest.raises(ParameterError, match="positive"):
        forward.smaller_vs_faster(fit, 6e9, factors=[0])
