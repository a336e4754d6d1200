"""What to launch (``serving_decision.final_launch``): the trace's pick where the bursty trace ran,
else the decision's own launch, with the levels it rests on."""

import math

import pandas as pd

from specnb.predict.policy_record import policy_of
from specnb.predict.serving_decision import ServingDecision, final_launch


def decision(kind: str, ks=(3, 0), **fields) -> ServingDecision:
    policy = policy_of(pd.DataFrame({"concurrency": [1, 4], "config": ["ngram k=3" if k else "spec-off" for k in ks],
                                     "k": list(ks)}), "concurrency")
    return ServingDecision(seed=0, engine="llama.cpp", policy=policy, launched=policy, kind=kind, **fields)


def test_nothing_to_decide_is_no_launch():
    final = final_launch(decision(""))
    assert final.basis == "" and final.line == "" and math.isnan(final.low)


def test_the_decision_launches_where_no_trace_ran():
    final = final_launch(decision("static", ks=(3, 3), config="ngram k=3"))
    assert (final.basis, final.config, final.low, final.high, final.drafted) == ("static", "ngram k=3", 1, 4, True)
    none = final_launch(decision("none", ks=(0, 0), config="spec-off"))
    assert none.basis == "none" and not none.drafted and none.line == ""


def test_a_trace_that_ran_decides():
    picked = decision("schedule", trace_pick="spec-off", trace_json="")
    trace = pd.DataFrame({"config": ["spec-off"]})
    assert final_launch(picked, trace).basis == "trace" and final_launch(picked, trace).config == "spec-off"
    assert final_launch(picked, pd.DataFrame()).basis == "schedule"  # no trace measured: the decision's own
