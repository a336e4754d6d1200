"""Notebook 08's configurations, charts and text: speculation in a serving engine under load."""

from __future__ import annotations

import json
import math
import os
import re

import altair as alt
import pandas as pd

from specnb.app.report import Report, bullets
from specnb.core.errors import ParameterError
from specnb.engine.serving import SPEC_TYPES, ServerConfig, default_threads, spec_flags
from specnb.measure.serving import Target
from specnb.measure.serving_summary import BASELINE_CONFIG
from specnb.predict.serving import (
    llama_server_flags,
    median_error,
    serving_policy,
    step_cost,
    step_ms,
    vllm_config,
)

ENGINES = ("llama.cpp", "vllm", "sglang")

# ---------------------------------------------------------------- configurations


def server_configs(verifier: str, precision: str, speculation: list[str], slots: int, ctx_per_slot: int,
                   threads: int = 0) -> list[ServerConfig]:
    """spec-off, then one server per ``speculation`` entry: ``"ngram-simple:4"`` (an n-gram type and
    its draft length) or ``"smollm2-draft-s:3"`` (an embedded draft, exported to GGUF, at k = 3)."""
    from specnb.models.gguf import embedded_gguf

    model = str(embedded_gguf(verifier, precision))
    common = {"model": model, "slots": slots, "ctx_per_slot": ctx_per_slot, "threads": threads or default_threads()}
    configs = [ServerConfig(BASELINE_CONFIG, **common)]
    for spec in speculation:
        kind, _, k = spec.rpartition(":")
        if not kind or not k.isdigit() or int(k) < 1:
            raise ParameterError(f"speculation entry {spec!r} must be TYPE:K or DRAFT:K with K >= 1, e.g. "
                                 "ngram-simple:4 or smollm2-draft-s:3")
        if kind in SPEC_TYPES:
            configs.append(ServerConfig(f"{kind} k={k}", spec_type=kind, n_max=int(k), **common))
        else:
            draft = str(embedded_gguf(kind, "q4_1" if precision == "q4_1" else "f32"))
            configs.append(ServerConfig(f"{kind} k={k}", spec_type="draft-simple", draft=draft, n_max=int(k),
                                        **common))
    return configs


def endpoint_targets(endpoint: str, engine: str) -> list[Target]:
    """``URL`` (one configuration, named spec-off) or ``name=URL,name=URL`` (one per configuration;
    the one named spec-off is the baseline). Non-loopback hosts are refused unless
    ``SPECNB_ALLOW_REMOTE=1``: only loopback by default."""
    if engine not in ENGINES:
        raise ParameterError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    targets = []
    for i, part in enumerate(p.strip() for p in endpoint.split(",") if p.strip()):
        name, _, url = part.rpartition("=") if "=" in part.split("://")[0] else ("", "", part)
        url = url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ParameterError(f"endpoint {url!r} must start with http:// or https://, e.g. http://127.0.0.1:8000")
        host = url.split("://", 1)[1].split("/")[0].rsplit(":", 1)[0].strip("[]")
        if host not in ("127.0.0.1", "localhost", "::1") and os.environ.get("SPECNB_ALLOW_REMOTE") != "1":
            raise ParameterError(f"endpoint host {host!r} is not loopback; set SPECNB_ALLOW_REMOTE=1 to measure it")
        targets.append(Target(name or (BASELINE_CONFIG if i == 0 else f"config {i + 1}"), url, engine))
    if not targets:
        raise ParameterError("endpoint is empty; pass http://host:port or name=URL,name=URL")
    return targets


def probe_upto(levels, configs: list[ServerConfig]) -> int:
    """The largest verification batch the sweep can reach: the top level × (1 + the longest draft)."""
    return int(max(levels) * (1 + max([c.n_max for c in configs if c.spec_type != "none"] + [0])))


def draft_lengths(names, configs: list[ServerConfig]) -> dict[str, int]:
    """Draft length per speculative configuration: from the launches, or (endpoints) from a
    ``k=N`` in the configuration's name, as the README's examples name them."""
    if configs:
        return {c.name: c.n_max for c in configs if c.spec_type != "none"}
    found = {name: re.search(r"\bk=(\d+)", name) for name in names if name != BASELINE_CONFIG}
    return {name: int(m.group(1)) for name, m in found.items() if m}


def draft_kinds(names, configs: list[ServerConfig]) -> dict[str, bool]:
    """Whether each speculative configuration drafts with a model (n-grams cost no forward); endpoints
    named ``ngram…`` are n-grams, every other named with ``k=N`` a model (EAGLE, MTP, a draft)."""
    if configs:
        return {c.name: c.spec_type.startswith("draft") for c in configs if c.spec_type != "none"}
    return {name: not name.startswith("ngram") for name in draft_lengths(names, configs)}


def vllm_method(config: str) -> str:
    name = config.lower()
    return next((m for m in ("eagle3", "eagle", "mtp", "ngram", "suffix") if m in name), "draft_model")


# ---------------------------------------------------------------- tables and charts


def display_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The sweep as a reader wants it: per configuration and level, throughput, TPOT, α/τ, speedups."""
    def ci(row, name):
        if name not in row or pd.isna(row.get(name)) or row["config"] == BASELINE_CONFIG:
            return ""
        lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
        return f"{row[name]:.2f}x" + (f" [{lo:.2f}–{hi:.2f}]" if not pd.isna(lo) else "")

    order = {name: i for i, name in enumerate(dict.fromkeys([BASELINE_CONFIG, *summary["config"]]))}
    rows = summary.assign(_order=summary["config"].map(order)).sort_values(["_order", "concurrency"]).to_dict("records")
    return pd.DataFrame({
        "config": [r["config"] for r in rows], "concurrency": [r["concurrency"] for r in rows],
        "output tok/s": [round(r["output_throughput"], 1) for r in rows],
        "median TPOT ms": [round(r["median_tpot_ms"], 1) for r in rows],
        "median ITL ms": [round(r["median_itl_ms"], 1) for r in rows],
        "α": [round(r["alpha"], 3) for r in rows], "τ": [round(r["tau"], 2) for r in rows],
        "TPOT speedup": [ci(r, "speedup_tpot") for r in rows],
        "throughput speedup": [ci(r, "speedup_output_throughput") for r in rows],
        "partial": [r["partial"] for r in rows]})


def speedup_chart(summary: pd.DataFrame, metric: str = "speedup_tpot") -> alt.Chart:
    """Speedup over spec-off against concurrency (log scale) per configuration, 95% CI bars, 1.0 line."""
    frame = summary[summary["config"] != BASELINE_CONFIG].dropna(subset=[metric])
    x = alt.X("concurrency:Q", scale=alt.Scale(type="log", base=2), title="concurrent requests")
    line = alt.Chart(frame).mark_line(point=True).encode(
        x=x, y=alt.Y(f"{metric}:Q", title=f"{metric.replace('speedup_', '')} speedup over spec-off (x)"),
        color=alt.Color("config:N", title=None),
        tooltip=["config", "concurrency", alt.Tooltip(f"{metric}:Q", format=".2f"),
                 alt.Tooltip(f"{metric}_lo:Q", format=".2f"), alt.Tooltip(f"{metric}_hi:Q", format=".2f")])
    bars = alt.Chart(frame).mark_rule().encode(x=x, y=f"{metric}_lo:Q", y2=f"{metric}_hi:Q", color="config:N")
    unit = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 3]).encode(y="y:Q")
    return (line + bars + unit).properties(title="Speedup over spec-off as load grows (95% CI)", width=420,
                                           height=260)


def latency_throughput_chart(summary: pd.DataFrame) -> alt.Chart:
    """Output throughput against p50 and p90 TPOT, one curve per configuration through its levels."""
    frame = summary.melt(id_vars=["config", "concurrency", "output_throughput"],
                         value_vars=["median_tpot_ms", "p90_tpot_ms"], var_name="percentile", value_name="tpot_ms")
    frame["percentile"] = frame["percentile"].map({"median_tpot_ms": "p50", "p90_tpot_ms": "p90"})
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("tpot_ms:Q", title="TPOT per request (ms)"),
        y=alt.Y("output_throughput:Q", title="output throughput (tok/s)"),
        color=alt.Color("config:N", title=None), strokeDash=alt.StrokeDash("percentile:N", title=None),
        order="concurrency:Q",
        tooltip=["config", "concurrency", "percentile", alt.Tooltip("tpot_ms:Q", format=".1f"),
                 alt.Tooltip("output_throughput:Q", format=".1f")],
    ).properties(title="Latency against throughput (each point a concurrency level)", width=420, height=260)


def pooled_positions(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and draft position: the per-position rate pooled over levels (weighted by drafts)."""
    rows = []
    for config, group in summary[summary["spec_decode_num_drafts"] > 0].groupby("config", sort=False):
        drafts = group["spec_decode_num_drafts"].sum()
        rates = [json.loads(p) for p in group["per_position"]]
        width = max(len(r) for r in rates)
        for i in range(width):
            acc = sum(r[i] * d for r, d in zip(rates, group["spec_decode_num_drafts"]) if i < len(r))
            rows.append({"config": config, "position": i + 1, "rate": acc / drafts})
    return pd.DataFrame(rows, columns=["config", "position", "rate"])


def position_chart(summary: pd.DataFrame) -> alt.Chart:
    frame = pooled_positions(summary)
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("position:O", title="draft position"),
        y=alt.Y("rate:Q", title="accepted at this position ÷ drafts", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("config:N", title=None), tooltip=["config", "position", alt.Tooltip("rate:Q", format=".3f")],
    ).properties(title="Per-position acceptance from the engine's counters (all levels)", width=420, height=220)


def prediction_chart(validation: pd.DataFrame) -> alt.Chart:
    frame = validation.melt(id_vars=["config", "concurrency"], value_vars=["speedup_tpot", "predicted_speedup_tpot"],
                            var_name="kind", value_name="speedup")
    frame["kind"] = frame["kind"].map({"speedup_tpot": "measured", "predicted_speedup_tpot": "predicted"})
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("concurrency:Q", scale=alt.Scale(type="log", base=2), title="concurrent requests"),
        y=alt.Y("speedup:Q", title="TPOT speedup over spec-off (x)"), color=alt.Color("config:N", title=None),
        strokeDash=alt.StrokeDash("kind:N", title=None),
        tooltip=["config", "concurrency", "kind", alt.Tooltip("speedup:Q", format=".2f")],
    ).properties(title="Serving predictor: predicted against measured", width=420, height=240)


# ---------------------------------------------------------------- text


def fmt_ci(row, metric: str) -> str:
    lo, hi = row[f"{metric}_lo"], row[f"{metric}_hi"]
    return f"{row[metric]:.2f}x" + ("" if pd.isna(lo) else f" [{lo:.2f}–{hi:.2f}]")


def crossover_line(row) -> str:
    if row["verdict"] == "never pays":
        return f"**{row['config']}** does not pay even at the lowest level"
    if row["verdict"] == "pays at every level measured":
        return f"**{row['config']}** still pays at {row['max_level']:.0f} concurrent requests (the most measured)"
    lo = f"≤ {row['min_level']:.0f}" if row["crossover_lo"] <= row["min_level"] else f"{row['crossover_lo']:.1f}"
    hi = f"beyond {row['max_level']:.0f}" if pd.isna(row["crossover_hi"]) else f"{row['crossover_hi']:.1f}"
    return (f"**{row['config']}** stops paying at about {row['crossover']:.1f} concurrent requests (95% CI {lo}–{hi}; "
            "interpolated in log concurrency between the levels measured)")


def step_arithmetic(summary: pd.DataFrame, config: str, probe: pd.DataFrame | None = None) -> str:
    """Why a configuration does (not) pay at its lowest level, in the engine's own numbers."""
    from specnb.predict.serving import acceptance_of, verify_ms

    row = summary[summary["config"] == config].sort_values("concurrency").iloc[0]
    cost = step_cost(summary)
    b = float(row["concurrency"])
    d, tau = acceptance_of(row)
    t1, tv = step_ms(cost, b), verify_ms(cost, probe, b, d)
    source = "spec-off's step plus the forward probe" if probe is not None and len(probe) else "the spec-off curve"
    return (f"at {b:.0f} concurrent, a spec-off step costs {t1:.1f} ms for 1 token per request; {config} verifies "
            f"1 + {d:.2f} tokens per request per step (≈ {tv:.1f} ms from {source}) and yields {tau:.2f} tokens "
            f"per step (steps without a draft included): {tv / tau:.1f} ms per token before drafting, measured TPOT "
            f"{row['mean_tpot_ms']:.1f} ms against {t1:.1f} ms")


def sweep_text(summary: pd.DataFrame, crossings: pd.DataFrame, probe: pd.DataFrame | None = None) -> Report:
    if "speedup_tpot" not in summary:
        return Report("No spec-off configuration to compare with: the tables show each configuration alone.", {})
    lines, values = [], {}
    for config, group in summary[summary["config"] != BASELINE_CONFIG].groupby("config", sort=False):
        group = group.sort_values("concurrency")
        first, last = group.iloc[0], group.iloc[-1]
        lines.append(f"**{config}**: α {first['alpha']:.2f}, τ {first['tau']:.2f}; TPOT speedup "
                     f"{fmt_ci(first, 'speedup_tpot')} at {first['concurrency']} concurrent, "
                     f"{fmt_ci(last, 'speedup_tpot')} at {last['concurrency']}; output throughput "
                     f"{fmt_ci(first, 'speedup_output_throughput')} → {fmt_ci(last, 'speedup_output_throughput')}; "
                     f"{int(first['identical_outputs'])}/{int(first['paired_requests'])} outputs identical to spec-off")
        values[f"{config} speedup_tpot first"] = float(first["speedup_tpot"])
        values[f"{config} speedup_tpot last"] = float(last["speedup_tpot"])
    for row in crossings.to_dict("records"):
        lines.append(crossover_line(row))
        values[f"{row['config']} crossover"] = row["crossover"]
        if row["verdict"] == "never pays":
            lines.append("step arithmetic: " + step_arithmetic(summary, row["config"], probe))
    return Report(bullets(lines), values)


def prediction_text(validation: pd.DataFrame) -> Report:
    error = median_error(validation)
    if math.isnan(error):
        return Report("Too few levels to validate the serving predictor (it needs two or more).", {})
    worst = validation[~validation["calibration"]].sort_values("error").iloc[-1]
    held_out = (validation["prompts"] == "held out").all()
    where = ("on held-out prompts at every level (two folds of prompts with the same mix of categories, each "
             "predicted from the other)" if held_out else "over the levels it was not calibrated on, same prompts")
    return Report(bullets([
        f"median error of the predicted TPOT speedup {where}: **{error:.1%}** (target ≤ 15%); worst "
        f"{worst['error']:.1%} ({worst['config']} at {worst['concurrency']})",
        "calibrated on each configuration's lowest level (its acceptance, and for a draft model its drafting "
        "cost), with the spec-off TPOT curve as the engine's step cost and, where the engine was probed, its "
        "forward cost against tokens for the extra draft tokens"]),
        {"serving_predictor_median_error": error, "serving_predictor_prompts": "held out" if held_out else "same"})


def policy_text(summary: pd.DataFrame, policy: pd.DataFrame, lengths: dict[str, int],
                configs: list[ServerConfig]) -> Report:
    """The policy per level, then as vLLM's ``--speculative-config`` (one method per server: the
    schedule of the method chosen most often, re-chosen among its own configurations) and as
    llama-server flags."""
    if policy.empty:
        return Report("No speculative configuration to choose from.", {})
    flags = {c.name: " ".join("<draft GGUF>" if c.draft and f == str(c.draft) else f for f in spec_flags(c))
             for c in configs}
    chosen = [c for c in policy["config"] if c != BASELINE_CONFIG] or list(lengths)
    method = vllm_method(max(set(chosen), key=chosen.count))
    family = {c: k for c, k in lengths.items() if vllm_method(c) == method}
    own = serving_policy(summary[summary["config"].isin([BASELINE_CONFIG, *family])], family)
    vllm = vllm_config(own, method)
    lines = llama_server_flags(policy, flags)
    body = (bullets([f"{r['concurrency']} concurrent: {r['config']} (k = {r['k']}, TPOT {r['speedup_tpot']:.2f}x)"
                     for r in policy.to_dict("records")])
            + f"\n\nvLLM (`--speculative-config`, {method}, the ranges as measured here):\n\n```\n{vllm}\n```\n\n"
            + "llama-server (speculation is fixed per launch: pick by the load you expect):\n\n"
            + bullets(lines))
    return Report(body, {"policy_vllm": vllm, "policy_llama_server": lines})


def serving_conclusion(summary: pd.DataFrame, crossings: pd.DataFrame, validation: pd.DataFrame,
                       policy: pd.DataFrame, machine: str, note: str = "") -> Report:
    lines = [f"machine: {machine}"]
    if "speedup_tpot" in summary:
        for row in crossings.to_dict("records"):
            lines.append(crossover_line(row))
        error = median_error(validation) if len(validation) else math.nan
        if not math.isnan(error):
            lines.append(f"the serving predictor's median error: {error:.1%}")
        if len(policy):
            on = policy[policy["k"] > 0]["concurrency"].tolist()
            lines.append("policy: " + (f"speculate at concurrency {', '.join(map(str, on))}, spec-off elsewhere" if on
                                       else "spec-off at every level measured"))
    if note:
        lines.append(note)
    return Report(bullets(lines), {"machine": machine})


def saver(rec, commit: str | None):
    """A callback for ``run_sweep``'s ``on_run``: writes the per-request and per-run tables (with the
    commit) after every run, so an interrupted sweep keeps what it measured."""
    def save(sweep) -> None:
        rec.table("requests", sweep.records.assign(commit=commit or ""))
        rec.table("runs", sweep.runs.assign(commit=commit or ""))
    return save
