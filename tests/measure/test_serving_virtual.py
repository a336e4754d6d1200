"""serving_virtual: a sweep's target answered in virtual time by a simulated launch — the driver's own
records for the run's own feed, counters that add up, one launch carried across runs, and a whole
sweep whose A/A pair differs by exactly its two launch factors."""

from dataclasses import replace

import pytest

from specnb.measure.load_shapes import Closed, Lengths
from specnb.measure.prompts import select_prompts
from specnb.measure.serving_endpoint import scrape
from specnb.measure.serving_load import ClosedFeed, Requests, Target
from specnb.measure.serving_stats import summarise_sweep
from specnb.measure.serving_steady import send_sampled
from specnb.measure.serving_sweep import SweepHooks, SweepSettings, run_sweep
from specnb.measure.serving_virtual import VirtualEngine, sampled
from specnb.serve.simulated.sim_engine import SimCost, run_closed
from specnb.serve.speculation import SPEC_OFF, Speculation

NGRAM = Speculation(entry="ngram", k=3, method="ngram", family="ngram")
TEXTS = ["the quick brown fox", "a b c d e f", "one two", "lorem ipsum dolor sit amet"]


def virtual(speculation: Speculation, cost: SimCost | None = None, **engine) -> Target:
    return Target(url=f"virtual://{speculation.name}", engine="simulated", speculation=speculation,
                  virtual=VirtualEngine(cost or SimCost(), speculation, **engine))


def test_a_run_is_the_drivers_closed_loop_and_its_counters_add_up():
    target, load = virtual(NGRAM), Closed(concurrency=2, lengths=Lengths(tokens=8))
    asked, fill = Requests(texts=TEXTS, max_tokens=[5, 9, 7, 6]), Requests(texts=TEXTS[:3], max_tokens=[4, 4, 4])
    before = scrape(target)
    run = send_sampled(target, load, asked, True, 0, fill)
    counted = scrape(target).minus(before)
    sim = target.virtual.requests(asked.texts + fill.texts, asked.max_tokens + fill.max_tokens)
    rows = run_closed(SimCost(), NGRAM, sim, 2, feed=ClosedFeed(4, 3, 2))
    assert [d.output_tokens for d in run.done] == [r["output_tokens"] for r in rows]  # measured, then fillers sent
    assert [d.latency for d in run.done] == pytest.approx([r["latency"] for r in rows])
    assert [d.output_tokens for d in run.done[:4]] == [5, 9, 7, 6]
    assert counted.tokens_predicted == sum(d.output_tokens for d in run.done)  # the server's generation counter
    assert 0 < counted.accepted <= counted.draft_tokens == 3 * counted.drafts
    assert run.duration == pytest.approx(max(d.start_time + d.latency for d in run.done))
    again = send_sampled(target, load, asked, True, 1, fill)  # the same launch, its clock moved on
    assert min(d.start_time for d in again.done) == 0.0  # each run counts from its own start, as the client does
    assert [d.latency for d in again.done] == pytest.approx([d.latency for d in run.done])


def test_the_batch_is_sampled_as_the_gauge_reads_it():
    trace = [[10.0, 2], [10.1, 3], [10.6, 1], [10.7, 0]]  # [t_s, batch] at each step's start
    assert sampled(trace, 10.0, 0.8, every_s=0.25) == [(0.0, 2.0), (0.25, 3.0), (0.5, 3.0), (0.75, 0.0)]


def test_a_level_runs_on_its_own_cost_and_open_loops_are_refused():
    cheap, dear = SimCost(), replace(SimCost(), draft_per_token_ms=5.0)
    target, load = virtual(NGRAM, cheap, level_costs={2: dear}), Closed(concurrency=2, lengths=Lengths(tokens=8))
    asked = Requests(texts=TEXTS, max_tokens=[8] * 4)
    slow = send_sampled(target, load, asked, True, 0, Requests())
    fast = send_sampled(target, replace(load, concurrency=1), asked, True, 0, Requests())
    assert sum(d.latency for d in slow.done) > 2 * sum(d.latency for d in fast.done)
    with pytest.raises(ValueError, match="closed loops"):
        send_sampled(target, load, asked, False, 0, Requests())


def test_a_sweep_in_virtual_time_sees_exactly_the_launch_factors_between_two_launches():
    cost = SimCost(launch_jitter=0.05)
    twin = replace(SPEC_OFF, aa_twin=True)
    launches = {SPEC_OFF.name: replace(cost, launch_seed=1), twin.name: replace(cost, launch_seed=2)}
    targets = [virtual(s, launches[s.name]) for s in (SPEC_OFF, twin)]
    loads = [Closed(concurrency=c, lengths=Lengths(tokens=8), turnovers=1) for c in (1, 2)]
    sweep = run_sweep(targets, select_prompts("all", 4), loads, SweepSettings(rounds=2, probe_max_tokens=0),
                      SweepHooks(down=lambda name: ""))
    summary = summarise_sweep(sweep.records, sweep.runs, n_boot=20)
    factor = {name: VirtualEngine(c, SPEC_OFF).engine.launch_factor for name, c in launches.items()}
    assert factor[SPEC_OFF.name] != factor[twin.name]
    aa = summary[summary["config"] == twin.name]
    assert list(aa["speedup_tpot"]) == pytest.approx([factor[SPEC_OFF.name] / factor[twin.name]] * 2, rel=1e-9)
    assert (sweep.runs["completed"] > 0).all() and sweep.stopped == ""
