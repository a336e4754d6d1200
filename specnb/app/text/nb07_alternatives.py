"""What notebook 07 says: the alternatives table as a reader wants it, which option wins on this
machine and what it costs, the speculation tax split by engine, and what batching buys."""

from __future__ import annotations

import pandas as pd

from specnb.app.text.cell_report import Report
from specnb.app.text.common import bullets, fidelity_text
from specnb.core.intervals import VERDICTS, speedup_text, verdict
from specnb.predict.engine_choice import choices


def display_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The alternatives table as a reader wants it: fastest first, speedup with its CI, fidelity."""
    rows = summary.sort_values("speedup", ascending=False)
    return pd.DataFrame({
        "method": rows["method"], "tok/s": rows["tok_s"].round(1),
        "speedup": [speedup_text(r.speedup, r.speedup_lo, r.speedup_hi) for r in rows.itertuples()],
        "tokens / verifier forward": rows["tokens_per_forward"].round(2),
        "fidelity to fp32 greedy": [fidelity_text(r) for r in rows.itertuples()],
    })


def rate(row) -> str:
    speedup = speedup_text(row.speedup, None if pd.isna(row.speedup_lo) else row.speedup_lo, row.speedup_hi)
    return f"**{row.method}** {speedup} ({row.tok_s:.1f} tok/s)"


def noise_text(a, b) -> str:
    """Whether ``a``'s 95% CI of the speedup lies wholly above ``b``'s, in words ("" without both CIs)."""
    if pd.isna([a.speedup_lo, a.speedup_hi, b.speedup_lo, b.speedup_hi]).any():
        return ""
    above = verdict(a.speedup - b.speedup, a.speedup_lo - b.speedup_hi, a.speedup_hi - b.speedup_lo, at=0.0)
    return ", beyond noise" if above == VERDICTS[0] else ", though their CIs overlap"


def machine_verdict(spec, winner, lossless, machine: str) -> str:
    """The page's answer: do something else (an option faster than the best speculation, beyond noise
    or not, as its CIs say), speculate (speculation is the best and its CI wins over verifier-only),
    or neither (the best speculation's CI holds 1x or lies below it)."""
    if spec is None:
        return f"**On {machine}, no speculative configuration was measured.**"
    if winner is not None and winner.method != spec.method and winner.speedup > spec.speedup:
        same = "with the same output" if winner is lossless else "with a different output"
        return (f"**On {machine}, do something else:** {winner.method} is {winner.speedup:.2f}x against "
                f"speculation's {spec.speedup:.2f}x ({winner.speedup / spec.speedup:.2f}x better"
                f"{noise_text(winner, spec)}), {same}.")
    said = verdict(spec.speedup, spec.speedup_lo, spec.speedup_hi)
    if said == VERDICTS[0]:
        return f"**On {machine}, speculate:** it is the best lossless option measured ({spec.speedup:.2f}x)."
    how = "slower than" if said == VERDICTS[2] else "not faster beyond noise than"
    return (f"**On {machine}, keep verifier-only:** the best lossless option measured is speculation, and it is "
            f"{how} verifier-only ({speedup_text(spec.speedup, spec.speedup_lo, spec.speedup_hi)}, {said}).")


def alternatives_conclusion(summary: pd.DataFrame, notes: list[str], machine: str) -> Report:
    """Notebook 07's conclusion: which option wins on this machine and by how much, and what it costs."""
    pick = choices(summary)
    spec, lossless, fastest = pick["speculation"], pick["lossless"], pick["fastest"]
    lines = []
    if spec is not None:
        same = spec.identical_prompts == spec.prompts
        lines.append(f"Best speculation on the PyTorch fp32 verifier: {rate(spec)}; " + (
            "the verifier's output on every prompt, as speculation guarantees." if same else
            f"{fidelity_text(spec)}: float rounding in the multi-token forward flipped a near-tie."))
    if lossless is not None:
        lines.append(f"Fastest with the fp32 verifier's exact output: {rate(lossless)}.")
    if fastest is not None and (lossless is None or fastest.method != lossless.method):
        lines.append(f"Fastest of all: {rate(fastest)}, at a price: {fidelity_text(fastest)}.")
    lines.append(machine_verdict(spec, lossless if lossless is not None else fastest, lossless, machine))
    lines += [f"Not measured: {note}" for note in notes]
    values = {"machine": machine, "notes": notes}
    for key, row in pick.items():
        if row is not None:
            values[f"{key}_method"], values[f"{key}_speedup"] = row.method, round(float(row.speedup), 3)
    return Report(bullets(lines), values)


def tax_text(fits: pd.DataFrame, summary: pd.DataFrame, bandwidth) -> Report:
    """What the split says: per engine its t0, slope and 1→2 jump, and verifier-only tok/s as a share
    of the memory floor; then framework vs machine from eager and llama.cpp on the same fp32 bytes."""
    verifier_only = summary[summary["speculation"] == ""]
    tok_s = {f"{r.engine} · {r.precision}": r.tok_s for r in verifier_only.itertuples()}
    lines = [f"Measured bandwidth (matrix-vector product, {bandwidth.threads} threads): {bandwidth.matvec_gbs:.1f} "
             f"GB/s; copy {bandwidth.copy_gbs:.1f} GB/s."]
    values = {"bandwidth_gbs": round(bandwidth.matvec_gbs, 2)}
    for r in fits.itertuples():
        speed = tok_s.get(r.engine)
        share = f"; verifier-only {speed:.1f} tok/s = {speed / r.floor_tok_s:.0%} of its floor" if speed else ""
        slope = f"{'+' if r.ms_per_token >= 0 else '−'} {abs(r.ms_per_token):.1f} ms·n"  # never "+ -20.6"
        lines.append(f"{r.engine}: t = {r.t0_ms:.1f} ms {slope} (R² {r.r2:.2f}), t(2)/t(1) = "
                     f"{r.t2_over_t1:.2f}; {r.step_mb:.0f} MB per step → floor {r.floor_tok_s:.0f} tok/s{share}.")
        values[f"tax_{r.engine}"] = {"t0_ms": round(r.t0_ms, 2), "ms_per_token": round(r.ms_per_token, 2),
                                     "t2_over_t1": round(r.t2_over_t1, 3), "floor_tok_s": round(r.floor_tok_s, 1),
                                     "share_of_floor": round(speed / r.floor_tok_s, 3) if speed else None}
    eager = fits[fits["engine"] == "PyTorch eager · fp32"]
    native = fits[fits["engine"] == "llama.cpp · F32"]
    if len(eager) and len(native):
        e, n = eager.iloc[0], native.iloc[0]
        lines.append(f"Same fp32 bytes, two engines: a 1-token forward costs {e.t1_ms:.1f} ms in PyTorch eager and "
                     f"{n.t1_ms:.1f} ms in llama.cpp against a floor of {e.floor_ms:.1f} ms. Of eager's time, "
                     f"{max(e.t1_ms - n.t1_ms, 0):.1f} ms ({max(e.t1_ms - n.t1_ms, 0) / e.t1_ms:.0%}) is framework and "
                     f"kernel choice (llama.cpp does without it); {n.t1_ms - e.floor_ms:.1f} ms is what even llama.cpp "
                     "spends above the floor.")
        values["framework_share_of_eager_step"] = round(max(e.t1_ms - n.t1_ms, 0) / e.t1_ms, 3)
    return Report(bullets(lines), values)


def batching_text(table: pd.DataFrame) -> Report:
    last = table.iloc[-1]
    lines = [f"Batch {int(r.batch_size)}: {r.throughput_tok_s:.1f} tok/s in total ({r.throughput_x:.2f}x batch "
             f"1), each prompt waits {r.latency_ms / 1e3:.1f} s ({r.latency_x:.2f}x)" for r in table.itertuples()]
    text = bullets(lines, f"Batching multiplies throughput by {last.throughput_x:.2f} at batch "
                          f"{int(last.batch_size)}, paid in latency: it serves many users, speculation serves one "
                          "faster.")
    return Report(text, {"batching": table.round(3).to_dict(orient="records")})
