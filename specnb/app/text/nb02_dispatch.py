"""What notebook 02 says: the fitted fixed cost per forward and its share of the verifier's, each
draft's FLOPs c against its wall-clock c, and how many tree nodes verify at a chain's price."""

from __future__ import annotations

import pandas as pd

from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets
from specnb.core import reference
from specnb.core.reference import REFERENCE_MPS


def speed_text(flops_smaller: float, times_faster: float) -> str:
    """"but only 2.80x faster" where a draft gains less than its FLOPs promise (the dispatch tax), "and
    7.10x faster" where it gains more (a timing the FLOPs cannot explain: noise, or a kernel path)."""
    return f"{'but only' if times_faster < flops_smaller else 'and'} {times_faster:.2f}x faster"


def dispatch_conclusion(grid: pd.DataFrame, fit, ratios: pd.DataFrame, verifier_flops: float, verifier: str,
                        device) -> Report:
    """Notebook 02's conclusion: the fitted fixed cost t0 and its share of the verifier's forward
    next to the reference run's, what 6x fewer FLOPs buys here, each draft's two c, and what
    verifying the most tokens measured costs."""
    from specnb.measure.forward import smaller_vs_faster  # deferred: loads torch and numpy

    t_verifier = float(fit.predict_ms(verifier_flops))
    share = fit.t0_ms / t_verifier
    six = float(smaller_vs_faster(fit, verifier_flops, [6])["times_faster"].iloc[0])
    v_rows = grid[(grid["model"] == verifier) & (grid["batch_size"] == 1)].set_index("n_tokens")["median_ms"]
    n_max = int(v_rows.index.max())
    lines = [f"On {device} a forward costs t₀ = {fit.t0_ms:.1f} ms plus {fit.ms_per_gflop:.1f} ms per GFLOP "
             f"(R² = {fit.r2:.3f}); t₀ is {share:.0%} of the verifier's one-token forward ({t_verifier:.1f} ms by the "
             f"fit, {v_rows[1]:.1f} ms measured). The reference's MPS run implies about "
             f"{reference.dispatch_share():.0%}.",
             f"By this fit, a draft with 6x fewer FLOPs would be {six:.2f}x faster per token (the reference saw "
             f"{REFERENCE_MPS['draft_speed_ratio']}x)."]
    if abs(share) < 0.05:
        lines.append("Dispatch is negligible on this device (t₀ within a few % of zero): per token, the FLOPs c is "
                     "close to the wall-clock c, unlike on the reference's MPS run.")
    lines += [f"{r.draft}: {r.flops_smaller:.1f}x fewer FLOPs {speed_text(r.flops_smaller, r.times_faster)}: FLOPs c = "
              f"{r.flops_c:.3f}, wall-clock c = {r.wall_clock_c:.3f}." for r in ratios.itertuples()]
    lines.append(f"Verifying {n_max} tokens in one forward costs {v_rows[n_max] / v_rows[1]:.1f}x one token, not "
                 f"{n_max}x.")
    values = {"t0_ms": round(fit.t0_ms, 3), "ms_per_gflop": round(fit.ms_per_gflop, 3), "fit_r2": round(fit.r2, 4),
              "dispatch_share_of_verifier_forward": round(share, 4), "six_times_smaller_is_times_faster": round(six, 3),
              f"verifier_ms_{n_max}_tokens_over_1": round(float(v_rows[n_max] / v_rows[1]), 3)}
    for r in ratios.itertuples():
        values[f"wall_clock_c_{r.draft}"] = round(r.wall_clock_c, 4)
        values[f"flops_c_{r.draft}"] = round(r.flops_c, 4)
    return Report(bullets(lines, "Notebook 03 uses the wall-clock c next to the FLOPs c to predict the measured "
                                 "speedup."),
                  values)


def tree_width_text(widths: pd.DataFrame, verifier: str) -> Report:
    """What ``forward.tree_widths`` says about trees: how many candidates a verification can carry at
    a chain's price."""
    lines = [f"A chain verifying {int(r.chain_tokens)} tokens costs {r.chain_ms:.1f} ms on {verifier}; a forward of "
             f"{int(r.widest_tokens)} tokens costs {r.widest_ms:.1f} ms (within {r.tolerance:.0%}), so a tree of up to "
             f"{int(r.widest_tokens) - 1} candidate nodes verifies at about the chain's price"
             + (f"; {int(r.next_tokens)} tokens cost {r.next_ms:.1f} ms." if pd.notna(r.next_tokens)
                else "; no larger forward was measured.")
             for r in widths.itertuples()]
    values = {f"tree_tokens_at_chain_{int(r.chain_tokens)}": int(r.widest_tokens) for r in widths.itertuples()}
    return Report(bullets(lines), values)
