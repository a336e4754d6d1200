"""oneDNN-prepacked linears compute what PyTorch's default linears compute (to float rounding), for
one row, a few rows and a prefill, and keep speculative decoding lossless; ``kernels="auto"`` times
the two paths, follows its rule, caches and records the decision, and changes no token."""

import copy

import pytest
import torch
from helpers import peaked_pair, ragged_prompts, tiny_model

from specnb.core.errors import ParameterError
from specnb.decode.generate import generate
from specnb.decode.settings import Decoding
from specnb.models import kernels
from specnb.models.kernels import PackedLinear, use_kernels

pytestmark = pytest.mark.usefixtures("one_thread")


def test_packed_linear_matches_the_default_for_every_row_count():
    torch.manual_seed(0)
    weight = torch.randn(96, 64)
    packed = PackedLinear(weight, max_rows=8)
    mixed = PackedLinear(weight, max_rows=8, spans=((1, 1), (4, 8)))
    for rows in (1, 2, 3, 8, 9, 40):  # 1..8: oneDNN (mixed: 2, 3 on MKL); more: MKL's GEMM
        x = torch.randn(2, rows, 64) if rows == 40 else torch.randn(rows, 64)
        torch.testing.assert_close(packed(x), x @ weight.T, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mixed(x), x @ weight.T, rtol=1e-5, atol=1e-5)


def test_packed_linear_sends_exactly_its_spans_to_onednn(monkeypatch):
    """Which kernel each row count reaches: oneDNN's op for the rows in ``spans``, F.linear for the rest."""
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(kernels.torch.ops.mkldnn, "_linear_pointwise",
                        lambda x, *a: calls.append(x.shape[0]) or real(x, *a), raising=False)
    layer = PackedLinear(torch.randn(16, 8), max_rows=8, spans=((1, 1), (4, 8)))
    for rows in range(1, 11):
        layer(torch.randn(rows, 8))
    assert calls == [1, 4, 5, 6, 7, 8]
    layer.run(torch.randn(2, 8), "onednn")  # what auto times: the kernel named, whatever the spans
    assert calls == [1, 4, 5, 6, 7, 8, 2]
    assert PackedLinear(torch.randn(16, 8), max_rows=8).spans == ((1, 8),)  # the default: every row to oneDNN


def test_a_swapped_model_keeps_its_ties_and_its_outputs():
    verifier, draft = peaked_pair("llama")
    swapped = use_kernels(copy.deepcopy(verifier), "onednn")
    assert sum(isinstance(m, PackedLinear) for m in swapped.modules()) == 7 * 2 + 1  # 7 per layer, the head
    ids, mask = ragged_prompts()
    with torch.inference_mode():
        torch.testing.assert_close(swapped(input_ids=ids, attention_mask=mask).logits,
                                   verifier(input_ids=ids, attention_mask=mask).logits, rtol=1e-4, atol=1e-4)
    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=12)).tokens
    use_kernels(draft, "onednn")
    assert generate(swapped, ids, mask, decoding=Decoding(max_new_tokens=12)).tokens == expected
    assert generate(swapped, ids, mask, draft=draft, decoding=Decoding(gamma=3, max_new_tokens=12)).tokens == expected


def test_unknown_kernels_or_a_half_precision_model_are_one_line_errors():
    verifier, _ = peaked_pair("llama")
    with pytest.raises(ParameterError, match="unknown kernels 'mkl'"):
        use_kernels(verifier, "mkl")
    with pytest.raises(ParameterError, match="fp32 models on the CPU"):
        use_kernels(copy.deepcopy(verifier).to(torch.bfloat16), "onednn")


# ---------------------------------------------------------------- kernels="auto"

@pytest.fixture
def decisions(tmp_path, monkeypatch):
    """A fresh per-machine decision cache (``$SPECNB_CACHE``) for each test."""
    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    return tmp_path / kernels.CACHE_FILE


def faster(path: str):
    """A stand-in for ``time_paths`` under which ``path`` is clearly faster (2x) at every width."""

    def timed(layers, widths, budget_s=1.0):
        assert layers and all(isinstance(m, PackedLinear) for m in layers)
        slow, quick = [2.0] * len(widths), [1.0] * len(widths)
        return {"default": quick if path == "default" else slow, "onednn": quick if path == "onednn" else slow}, 3

    return timed


@pytest.mark.parametrize("forced", [None, "onednn", "default"])
def test_auto_decodes_exactly_what_the_default_decodes(decisions, monkeypatch, forced):
    """Whatever auto picks (timed for real on a tiny model, or forced either way), greedy tokens with and
    without a draft are the default kernels' tokens."""
    if forced:
        monkeypatch.setattr(kernels, "time_paths", faster(forced))
    verifier, draft = peaked_pair("llama")
    ids, mask = ragged_prompts()
    expected = generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=12)).tokens
    v_choice = kernels.apply_kernels(verifier, "auto", "verifier")
    d_choice = kernels.apply_kernels(draft, "auto", "draft")
    if forced:
        assert v_choice.path == d_choice.path == forced
    packed = sum(isinstance(m, PackedLinear) for m in verifier.modules())
    assert packed == (0 if v_choice.path == "default" else 15) and verifier.kernels == v_choice.path
    assert generate(verifier, ids, mask, decoding=Decoding(max_new_tokens=12)).tokens == expected
    assert generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=3, max_new_tokens=12)).tokens == expected


def test_the_rule_sends_each_row_count_to_the_clearly_faster_path():
    def decide(default, onednn, widths=(1, 2, 4)):
        return kernels.decide({"default": default, "onednn": onednn}, widths, max_rows=64)

    assert decide([10.0, 10.0, 20.0], [9.5, 9.5, 19.0]) == ("default", ())  # 5% faster: noise
    assert decide([10.0, 10.0, 20.0], [8.0, 8.0, 17.0]) == ("onednn", ((1, 64),))  # clearly faster everywhere
    assert decide([10.0, 20.0, 40.0], [8.0, 30.0, 30.0]) == ("mixed", ((1, 1), (4, 64)))  # not at 2 rows (a Xeon)
    assert decide([10.0, 10.0, 20.0], [10.0, 14.0, 16.0]) == ("mixed", ((4, 64),))  # oneDNN from 4 rows only
    assert decide([10.0, 10.0, 20.0], [8.0, 8.0, 21.0]) == ("mixed", ((1, 2),))  # 3 rows: MKL, as at 4
    assert decide([10.0, 20.0, 30.0], [11.0, 17.0, 20.0], (2, 4, 8)) == ("mixed", ((4, 64),))
    assert decide([10.0, 20.0, 30.0], [11.0, 17.0, 29.0], (2, 4, 8)) == ("mixed", ((4, 4),))
    assert decide([10.0, 20.0], [8.0, 17.0], (2, 4)) == ("mixed", ((2, 64),))  # one row untimed: MKL


def test_mixed_sends_only_the_wider_forwards_to_onednn(decisions, monkeypatch):
    def mixed(layers, widths, budget_s=1.0):
        return {"default": [1.0, 1.0, 2.0], "onednn": [1.0, 1.5, 1.0]}, 3

    monkeypatch.setattr(kernels, "time_paths", mixed)
    verifier, draft = peaked_pair("llama")
    ids, mask = ragged_prompts()
    expected = generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=4, max_new_tokens=12)).tokens
    choice = kernels.apply_kernels(verifier, "auto", "verifier")
    assert (choice.path, choice.min_rows, choice.spans, verifier.kernels) == ("mixed", 4, ((4, 64),), "mixed")
    assert {m.spans for m in verifier.modules() if isinstance(m, PackedLinear)} == {((4, 64),)}
    assert "mixed (oneDNN 4–64 rows)" in choice.text() and kernels.kernel_label(verifier) == "mixed (oneDNN 4–64 rows)"
    assert generate(verifier, ids, mask, draft=draft, decoding=Decoding(gamma=4, max_new_tokens=12)).tokens == expected
    again = tiny_model(peaked=8.0)  # same shapes: the cached decision, min_rows included
    assert kernels.apply_kernels(again, "auto").reason == "cached"
    assert {m.spans for m in again.modules() if isinstance(m, PackedLinear)} == {((4, 64),)}


def test_a_timed_decision_is_cached_per_machine_and_reused(decisions, monkeypatch):
    monkeypatch.setattr(kernels, "time_paths", faster("onednn"))
    first = kernels.apply_kernels(tiny_model(), "auto", "a")
    assert first.reason == "timed" and first.ms["onednn"] == [1.0, 1.0, 1.0] and first.rule
    assert decisions.is_file()
    monkeypatch.setattr(kernels, "time_paths", lambda *a, **k: pytest.fail("a cached decision is not re-timed"))
    again = kernels.apply_kernels(tiny_model(seed=1), "auto", "b")  # same shapes, other weights
    assert (again.path, again.reason, again.model, again.ms) == ("onednn", "cached", "b", first.ms)
    other = tiny_model(hidden=32)
    monkeypatch.setattr(kernels, "time_paths", faster("default"))
    assert kernels.apply_kernels(other, "auto").reason == "timed"  # other shapes: timed afresh


def ticks(step_s: float):
    """A scripted clock: each reading ``step_s`` seconds after the last (one sweep = one step)."""
    readings = iter(range(10**6))
    return lambda: next(readings) * step_s


def packed_layers(model) -> list[PackedLinear]:
    return [m for m in use_kernels(model, "onednn").modules() if isinstance(m, PackedLinear)]


def test_time_paths_repeats_rounds_until_the_budget_is_spent():
    """On a clock where every reading is 1 ms after the last (the clock is read at each timed
    sweep's start and end only, so each takes 1 ms): 4 timed sweeps a round (2 paths x 2 widths),
    so a budget just under 20 ms buys 5 rounds, a large one the cap, one shorter than a round still
    one; each sweep is the scripted 1 ms."""
    layers = packed_layers(tiny_model())
    ms, rounds = kernels.time_paths(layers, (2, 4), budget_s=0.0195, now=ticks(1e-3))
    assert rounds == 5 and ms == {"default": [1.0, 1.0], "onednn": [1.0, 1.0]}
    assert kernels.time_paths(layers, (2, 4), budget_s=0.003, now=ticks(1e-3))[1] == 1
    assert kernels.time_paths(layers, (2, 4), budget_s=10.0, now=ticks(1e-3))[1] == kernels.AUTO_MAX_REPEATS


def recorded_calls(monkeypatch, layers, on_call=lambda path, rows: None):
    """Log every linear kernel call time_paths makes as (path, rows, layer index), calling
    ``on_call(path, rows)`` first (a test's virtual clock advances there)."""
    calls: list = []
    index = {id(t): i for i, m in enumerate(layers) for t in (m.weight, m.packed)}
    real_linear, real_onednn = torch.nn.functional.linear, torch.ops.mkldnn._linear_pointwise

    def log(path, x, w):
        on_call(path, x.shape[0])
        calls.append((path, x.shape[0], index[id(w)]))

    monkeypatch.setattr(kernels.F, "linear", lambda x, w, *a: log("default", x, w) or real_linear(x, w, *a))
    monkeypatch.setattr(kernels.torch.ops.mkldnn, "_linear_pointwise",
                        lambda x, w, *a: log("onednn", x, w) or real_onednn(x, w, *a), raising=False)
    return calls


def test_every_timed_sweep_follows_an_untimed_sweep_of_its_own(monkeypatch):
    """What decoding runs: a step on a path follows a step on that path, its weights just read and
    OpenMP's workers awake where the kernel forks (MKL's one-row kernel does not; a real forward
    does elsewhere). So each timed sweep (the calls between two clock readings) is every layer once,
    in order, on one path and row count, and the calls just before it are the same sweep, untimed;
    every path and width is timed."""
    layers = packed_layers(tiny_model())
    calls = recorded_calls(monkeypatch, layers)
    readings = []

    def clock():
        readings.append(len(calls))
        return len(readings) * 1e-3

    kernels.time_paths(layers, (1, 2, 4), budget_s=0.05, now=clock)
    segments = [calls[a:b] for a, b in zip(readings, readings[1:]) if b > a]
    segments = [calls[:readings[0]]] * (readings[0] > 0) + segments
    assert len(segments) % 2 == 0 and len(segments) >= 12
    for lead_in, timed in zip(segments[0::2], segments[1::2]):
        assert timed == lead_in
        assert [i for _, _, i in timed] == list(range(len(layers))) and len({c[:2] for c in timed}) == 1
    assert {s[0][:2] for s in segments} == {(p, n) for p in kernels.TIMED for n in (1, 2, 4)}


def test_a_stretch_of_stalled_rounds_does_not_decide(monkeypatch):
    """The cores taken by another process for a while (as on a shared machine): every call that forks
    onto a second thread (oneDNN at any row count, MKL's GEMM from 2 rows) then waits for it, MKL's
    one-row kernel, on the calling thread alone, never does. On a virtual clock the kernels advance,
    stalled for the first second, most rounds are stalled and the rest quiet; quiet, oneDNN is
    clearly faster at every width: auto must send every row count to it, as on that machine quiet."""
    quiet_ms = {("default", 1): 0.1, ("onednn", 1): 0.07, ("default", 2): 0.2, ("onednn", 2): 0.1,
                ("default", 4): 0.2, ("onednn", 4): 0.1}
    clock = [0.0]

    def advance(path, rows):
        stalled = clock[0] < 1.0 and (path, rows) != ("default", 1)
        clock[0] += (quiet_ms[path, rows] + (0.3 if stalled else 0.0)) / 1e3

    layers = packed_layers(tiny_model())
    recorded_calls(monkeypatch, layers, advance)
    ms, rounds = kernels.time_paths(layers, (1, 2, 4), budget_s=1.0, now=lambda: clock[0])
    assert rounds == kernels.AUTO_MAX_REPEATS and clock[0] > 1.0  # the stall was over before the last round
    assert kernels.decide(ms, (1, 2, 4)) == ("onednn", ((1, kernels.MAX_ROWS),))


def test_time_paths_gives_up_when_the_first_round_overruns_twice_the_budget():
    layers = packed_layers(tiny_model())
    assert kernels.time_paths(layers, (2, 4), budget_s=1.0, now=ticks(5.0)) == ({}, 0)  # 5 s a reading
    assert kernels.time_paths(layers, (2, 4), budget_s=1.0, now=ticks(0.1))[1] > 0  # 0.4 s a round: fits


def test_a_machine_too_busy_to_time_keeps_the_default(decisions, monkeypatch):
    monkeypatch.setattr(kernels, "time_paths", lambda *a, **k: ({}, 0))  # what time_paths says when too busy
    model = tiny_model()
    choice = kernels.apply_kernels(model, "auto", "busy")
    assert (choice.path, choice.reason, choice.repeats, choice.ms) == ("default", "too busy to time", 0, {})
    assert not any(isinstance(m, PackedLinear) for m in model.modules()) and not decisions.exists()
    assert "busy: default (auto, too busy to time)" == choice.text()


def test_a_decision_from_too_few_rounds_is_not_cached(decisions, monkeypatch):
    def one_round(layers, widths, budget_s=1.0):
        return faster("onednn")(layers, widths)[0], 1

    monkeypatch.setattr(kernels, "time_paths", one_round)
    assert kernels.apply_kernels(tiny_model(), "auto").path == "onednn"
    assert kernels.apply_kernels(tiny_model(), "auto").reason == "timed" and not decisions.exists()


def test_auto_is_the_default_off_fp32_and_an_explicit_path_is_kept(decisions, monkeypatch):
    monkeypatch.setattr(kernels, "time_paths", lambda *a, **k: pytest.fail("nothing to time"))
    half = tiny_model().to(torch.bfloat16)
    choice = kernels.apply_kernels(half, "auto")
    assert (choice.path, choice.reason, half.kernels) == ("default", "not fp32 on the CPU", "default")
    asked = kernels.apply_kernels(tiny_model(), "onednn", "v")
    assert (asked.path, asked.asked, asked.reason) == ("onednn", "onednn", "asked")
    assert kernels.apply_kernels(tiny_model(), "default").path == "default"


def test_timing_a_real_tiny_model_records_its_evidence(decisions):
    """Real timings, so nothing about which path wins or how long it took: the budget is wide enough
    (too busy only past 60 s for a round of a tiny model's layers, cached from 3 rounds, which a
    first round under 10 s gives) that any load still times it."""
    choice = kernels.choose_kernels(tiny_model(), "tiny", budget_s=30.0)
    assert choice.path in kernels.PATHS and choice.reason == "timed" and choice.repeats >= kernels.AUTO_REPEATS
    assert set(choice.ms) == set(kernels.TIMED) and all(len(v) == len(kernels.AUTO_WIDTHS) for v in choice.ms.values())
    assert choice.decide_s > 0 and choice.threads == torch.get_num_threads() and decisions.is_file()
    assert choice.text().startswith("tiny: ") and "x at 2 rows, " in choice.text() and "x at 4 rows" in choice.text()
    assert f"thread(s), {choice.repeats} rounds; " in choice.text()
