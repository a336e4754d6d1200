"""What notebook 01 says: the reference pair by FLOPs (c, Leviathan's speedup, the larger draft's
break-even α) and what each of the reader's model drafts must reach to break even."""

from __future__ import annotations

import pandas as pd

from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets
from specnb.core import theory
from specnb.core.reference import REFERENCE_MPS


def reference_theory(ref_table: pd.DataFrame, gammas=range(3, 9)) -> Report:
    """The reference pair by FLOPs (``specnb.decode.kinds.by_name.flops_table`` of the reference verifier,
    its 0.5B and 1.5B drafts): c, Leviathan's speedup at the reported α and γ = 4, and the 1.5B draft's break-even α."""
    v_gflops, d_gflops = (ref_table["flops_per_token"].iloc[i] / 1e9 for i in (0, 1))
    c_small, c_large = (float(ref_table["c_flops"].iloc[i]) for i in (1, 2))
    alpha = REFERENCE_MPS["alpha"]
    speedup = float(theory.expected_speedup(alpha, 4, c_small))
    best_gamma, best_speedup = theory.optimal_gamma(alpha, c_small)
    break_even = [float(theory.break_even_alpha(g, c_large)) for g in gammas]
    text = bullets([
        f"Reference: {v_gflops:.2f} vs {d_gflops:.2f} GFLOPs/token gives c = {c_small:.4f}; at α = {alpha} and γ = 4 "
        f"theory says {theory.format_speedup(speedup)} (best γ = {int(best_gamma)} gives only "
        f"{theory.format_speedup(best_speedup)}).",
        f"The 1.5B draft (c = {c_large:.4f}) needs α between {min(break_even):.0%} and {max(break_even):.0%} for "
        f"γ = {min(gammas)}..{max(gammas)} just to break even: " + ", ".join(f"{a:.0%}" for a in break_even) + "."])
    return Report(text, {"reference_verifier_gflops": v_gflops, "reference_draft_gflops": d_gflops,
                         "reference_c": round(c_small, 4), "reference_c_large": round(c_large, 4),
                         "reference_speedup_alpha_0392_gamma_4": round(speedup, 4),
                         "reference_break_even_alpha_c05002": [round(a, 4) for a in break_even]})


def model_draft_rows(flops: pd.DataFrame) -> pd.DataFrame:
    """The rows of a FLOPs table that are drafts with a model (prompt lookup has no FLOPs)."""
    return flops[(flops["role"] == "draft") & (flops["flops_per_token"] > 0)]


def theory_conclusion(ref_table: pd.DataFrame, ours: pd.DataFrame, gamma: int = 4) -> Report:
    """Notebook 01's conclusion: the reference by FLOPs, then what each of the user's model drafts
    must reach to break even at ``gamma`` by its FLOPs c (attention over the table's context included)."""
    ref = reference_theory(ref_table)
    lines, values = [ref.markdown], dict(ref.values)
    for r in model_draft_rows(ours).itertuples():
        be = float(theory.break_even_alpha(gamma, r.c_flops_at_context))
        lines.append(f"- {r.model}: FLOPs c = {r.c_flops_at_context:.3f}; at γ = {gamma} it must reach α ≥ {be:.0%} "
                     "to break even.")
        values[f"break_even_alpha_gamma{gamma}_{r.model}"] = round(be, 4)
    lines.append("\nThese are FLOPs-based predictions; notebook 02 measures the c this machine actually sees.")
    return Report("\n".join(lines), values)
