"""Draw the README's figure from committed benchmark results: each embedded draft's speedup at its best γ.

    python scripts/readme_figure.py      # writes docs/figures/drafts_speedup.png

Why from ``benchmarks/results/``: a figure in the README must be a real run's, and a run's figures stay
reproducible only where its raw results are committed. This one reads ``drafts_<tag>.json`` (written
by ``benchmarks/drafts.py --tag <tag>``) for each CPU kind listed below and draws what a report leads
with: speedup over verifier-only with its 95% CI, one row per draft, the 1.0x line marked. The
caption under the image in the README names the machines, dates and commits, which it prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "figures" / "drafts_speedup.png"
MACHINES = {"xeon": "Intel Xeon (Sapphire Rapids), 2 cores", "epyc-zen5": "AMD EPYC (Zen 5), 2 cores"}


def read_rows(tag: str, machine: str) -> list[dict]:
    """One row per draft: speedup at its best γ and its CI, from one tagged drafts run."""
    result = json.loads((RESULTS / f"drafts_{tag}.json").read_text())
    env = result["environment"]
    print(f"{machine}: {env['time_utc'][:10]}, commit {env['git_commit'][:7]}")
    return [{"draft": r["draft"], "machine": machine, "speedup": r["speedup"], "lo": r["speedup_lo"],
             "hi": r["speedup_hi"], "gamma": r["best_gamma"]} for r in result["table"]]


def draw(rows: list[dict]):
    """Points with CI bars per draft, one colour per machine, the break-even line at 1.0x."""
    import altair as alt
    import pandas as pd

    frame = pd.DataFrame(rows)
    order = frame.groupby("draft")["speedup"].mean().sort_values(ascending=False).index.tolist()
    y = alt.Y("draft:N", sort=order, title=None)
    colour = alt.Color("machine:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=0))
    offset = alt.YOffset("machine:N")
    bars = alt.Chart(frame).mark_rule(strokeWidth=2).encode(
        x=alt.X("lo:Q", title="speedup over verifier-only at the best γ (tok/s ratio, 95% CI)",
                scale=alt.Scale(domain=[0.5, 1.5])), x2="hi:Q", y=y, yOffset=offset, color=colour)
    points = alt.Chart(frame).mark_point(filled=True, size=50).encode(x="speedup:Q", y=y, yOffset=offset, color=colour)
    even = alt.Chart(pd.DataFrame({"x": [1.0]})).mark_rule(strokeDash=[4, 3], color="black").encode(x="x:Q")
    title = alt.TitleParams("Embedded drafts on a 2-core CPU: which ones make the verifier faster",
                            subtitle="smollm2-135m verifier, 16 prompts × 32 tokens, greedy, batch 1, γ 1 or 3")
    return (bars + points + even).properties(width=520, height=360, title=title)


def main() -> int:
    import vl_convert as vlc

    rows = [row for tag, machine in MACHINES.items() for row in read_rows(tag, machine)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(vlc.vegalite_to_png(draw(rows).to_dict(), scale=1.25))
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
