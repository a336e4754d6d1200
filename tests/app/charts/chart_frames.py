"""Small frames shaped like the tables a run writes (``outputs/<run>/*.csv``), for the chart tests.

Four drafts that share their γs, as notebook 03's default sweep does, so every chart that could pool
drafts or run out of colours is given the chance to; names as long as the embedded ones.
"""

import numpy as np
import pandas as pd

DRAFTS = ["prompt-lookup", "smollm2-eagle", "smollm2-eagle3", "smollm2-draft-m"]
GAMMAS = [1, 3, 5]
VERIFIER = "smollm2-135m"


def summary() -> pd.DataFrame:
    """``runs.summarise``: verifier-only and one row per draft and γ at batch 1."""
    rows = [{"candidate": "verifier-only", "draft": np.nan, "gamma": 0, "batch_size": 1, "tok_s": 6.0, "alpha": np.nan,
             "alpha_token": np.nan, "tau": 1.0, "speedup": 1.0, "speedup_lo": 1.0, "speedup_hi": 1.0}]
    for i, draft in enumerate(DRAFTS):
        for gamma in GAMMAS:
            alpha = 0.7 - 0.15 * i
            rows.append({"candidate": f"{draft} γ={gamma}", "draft": draft, "gamma": gamma, "batch_size": 1,
                         "tok_s": 6 + i + gamma / 2, "alpha": alpha / (1 + 0.1 * gamma), "alpha_token": alpha,
                         "tau": 1 + alpha * gamma / 2, "speedup": 0.9 + 0.1 * i + 0.02 * gamma,
                         "speedup_lo": 0.8 + 0.1 * i, "speedup_hi": 1.0 + 0.1 * i + 0.05 * gamma})
    frame = pd.DataFrame(rows)
    for stage in ("prefill", "draft", "verify", "accept", "rollback", "other"):
        frame[f"{stage}_ms_per_token"] = 1.0 + len(stage) / 10
    return frame


def predictions() -> pd.DataFrame:
    """``analysis.leviathan_predictions``: two readings per draft and γ."""
    rows = [{"candidate": f"{d} γ={g}", "draft": d, "gamma": g, "batch_size": 1, "alpha": 0.5, "c": c, "kind": kind,
             "source": f"{d} (Leviathan, {kind})", "speedup": 1.2 + 0.1 * g - c}
            for d in DRAFTS for g in GAMMAS for kind, c in (("FLOPs c", 0.05), ("wall-clock c", 0.1))]
    return pd.DataFrame(rows)


def steps() -> pd.DataFrame:
    """``analysis.measured_steps``: one row per draft and γ."""
    rows = []
    for i, d in enumerate(DRAFTS):
        for g in GAMMAS:
            parts = {"draft_cost": 0.05 * g * (i + 1), "verify_cost": 1.0 + 0.02 * g, "overhead_cost": 0.01 * g}
            rows.append({"candidate": f"{d} γ={g}", "draft": d, "gamma": g, "batch_size": 1, **parts,
                         "break_even_tokens": sum(parts.values()), "tokens_per_step": 1 + 0.3 * g / (i + 1)})
    return pd.DataFrame(rows)


def records() -> pd.DataFrame:
    """``runs.run_interleaved`` records: each draft's accept lengths its own (draft i accepts i fewer)."""
    rows = []
    for i, d in enumerate(DRAFTS):
        for g in GAMMAS:
            lengths = [min(g, max(0, k % (g + 1) - i)) for k in range(12)]
            accepted = [sum(n > j for n in lengths) for j in range(g)]
            drafted = [len(lengths)] * g
            rows.append({"candidate": f"{d} γ={g}", "draft": d, "gamma": g, "batch_size": 1, "prompt_ids": "p1",
                         "accept_lengths": lengths, "accepted_by_position": accepted,
                         "drafted_by_position": drafted, "accepted": sum(lengths), "drafted": g * len(lengths)})
    return pd.DataFrame(rows)


def profile() -> pd.DataFrame:
    """``AcceptanceProfile.to_frame`` per draft at γ = 4: position 3 reached once, 4 never."""
    rows = []
    for d in DRAFTS:
        for position, reached, accepted in ((1, 20, 12), (2, 12, 6), (3, 1, 1), (4, 0, 0)):
            rate = accepted / reached if reached else 1.0
            rows.append({"position": position, "reached": reached, "accepted": accepted, "conditional_rate": rate,
                         "rate": rate, "draft": d})
    return pd.DataFrame(rows)


def per_prompt_profile() -> pd.DataFrame:
    return pd.DataFrame([{"draft": d, "prompt_id": f"p{k}", "position": 1, "reached": 10, "accepted": 5 + k,
                          "conditional_rate": (5 + k) / 10} for d in DRAFTS for k in range(2)])


def forward_grid() -> pd.DataFrame:
    """``forward.measure_forward_grids``: the verifier and two drafts at 1, 2, 4, 8 tokens."""
    models = [VERIFIER, "smollm2-draft-xs", "smollm2-draft-s"]
    return pd.DataFrame([{"model": m, "n_tokens": n, "batch_size": 1, "median_ms": (50 - 20 * i) * (1 + n / 10),
                          "kind": "decode"} for i, m in enumerate(models) for n in (1, 2, 4, 8)])


def cost_models() -> pd.DataFrame:
    """``costs.cost_model_table``: the verifier with kernel breaks at 2 and 4 tokens."""
    measured = [[1.0, 1.0, 10.0], [2.0, 1.0, 20.0], [3.0, 1.0, 21.0], [4.0, 1.0, 40.0], [5.0, 1.0, 41.0]]
    return pd.DataFrame([{"model": VERIFIER, "kind": "decode", "t0_ms": 10.0, "ms_per_token": 6.0, "r2": 0.9,
                          "n_points": 5, "measured": measured, "breaks": [2, 4]}])


def cost_grid() -> pd.DataFrame:
    return pd.DataFrame([{"model": VERIFIER, "n_tokens": int(n), "batch_size": 1, "median_ms": ms, "kind": "decode"}
                         for n, _, ms in cost_models()["measured"].iloc[0]])


def simulated_runs(distinct: int = 3) -> pd.DataFrame:
    """``analysis.simulate_runs``: 1000 draws per draft taking ``distinct`` values."""
    return pd.DataFrame([{"candidate": f"{d} γ=3", "draft": d, "run": k, "prompts": 1,
                          "alpha": round(0.2 * i + 0.1 * (k % distinct), 3), "speedup": 1 + 0.1 * (k % distinct)}
                         for i, d in enumerate(DRAFTS[:3]) for k in range(1000)])


def prediction_table() -> pd.DataFrame:
    """``predictor.predict_grid`` tables at batch 1, one per draft."""
    return pd.DataFrame([{"draft": d, "gamma": g, "batch_size": 1, "predicted_speedup": 1.1 + 0.05 * g - 0.1 * i,
                          "speedup_lo": 1.0 - 0.1 * i, "speedup_hi": 1.3 + 0.05 * g - 0.1 * i,
                          "flops_leviathan_speedup": 1.4 + 0.05 * g, "break_even_alpha": 0.1}
                         for i, d in enumerate(DRAFTS) for g in range(1, 9)])


def validation() -> pd.DataFrame:
    return pd.DataFrame([{"draft": d, "gamma": g, "batch_size": 1, "measured_speedup": 1 + 0.1 * i + 0.03 * g,
                          "measured_lo": 0.9 + 0.1 * i + 0.01 * g, "measured_hi": 1.1 + 0.1 * i + 0.01 * g,
                          "predicted_speedup": 1.05 + 0.1 * i + 0.01 * g,
                          "predicted_lo": 1.0 + 0.1 * i, "predicted_hi": 1.1 + 0.1 * i + 0.02 * g,
                          "flops_leviathan_speedup": 1.3 + 0.02 * g,
                          "prediction_in_ci": True, "units": 4} for i, d in enumerate(DRAFTS) for g in (1, 3)])


def reference() -> pd.DataFrame:
    return pd.DataFrame([{"gamma": g, "alpha_reading": reading, "flat_alpha": 0.4,
                          "verify_extra_token_fraction": f, "predicted_tok_s": 10 + f + g,
                          "reported_tok_s": 12.3, "flops_theory_tok_s": 14.3, "verifier_only_tok_s": 14.4}
                         for g in (4, 7) for reading in ("accepted ÷ drafted at γ=4", "per-token α")
                         for f in (0.0, 0.05, 0.1)])


def break_even(labels: int = 11) -> pd.DataFrame:
    return pd.DataFrame([{"label": f"draft-number-{k} (c={0.01 * k:.3f})", "c": 0.01 * k, "gamma": g,
                          "break_even_alpha": min(1.0, 0.01 * k * g)} for k in range(labels) for g in (1, 2, 4, 8)])


def c_alpha(drafts: int = 10) -> pd.DataFrame:
    return pd.DataFrame([{"draft": f"draft-{k}", "alpha": 0.05 * k, "c": 0.02 * k, "best_speedup": 1.0,
                          "best_gamma": 1, "verdict": "wins" if k % 2 else "loses"} for k in range(drafts)])


def ragged() -> pd.DataFrame:
    return pd.DataFrame([{"candidate": c, "gamma": g, "batch_size": b, "masked_slot_share": 0.1 * b,
                          "idle_row_share": 0.05 * b} for c, g in (("verifier-only", 0), ("smollm2-draft-s γ=2", 2))
                         for b in (1, 2, 4)])
