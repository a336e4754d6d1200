"""What a draft gets right: per-position acceptance profiles and acceptance traces.

Two views of the same thing.

``AcceptanceProfile`` counts, per draft position i, how often a speculative run reached position i
and accepted it (what vLLM's spec-decode metrics and Chen et al. 2023 report). It is what a run
*did* at one γ.

``AcceptanceTrace`` says, for every token the verifier generates, how many of the following
tokens the draft would propose and have accepted if a step started there. Under greedy decoding
speculative output equals the verifier's own output, so a step that starts after token j proposes
the draft's greedy continuation of the verifier's text, and its position i is accepted exactly
when the draft's argmax matches the verifier's token j + i given the verifier's prefix. One
verifier-only generation plus one teacher-forced forward of the draft therefore give the whole
trace, and ``replay`` turns it into the exact steps speculative decoding takes at *any* γ and
batch size (the same steps ``decoding.generate`` takes, token for token; tested).

Why the predictor replays traces instead of sampling from a profile: a profile measured at one γ
does not transfer to another. At γ = 8 position 1 is reached mostly right after a rejection, that
is inside text the draft finds hard; at γ = 1 every other token is a position 1. Agreement comes in
spans (boilerplate, copied text), so the γ = 8 profile understates acceptance at γ = 1, and a prompt
lookup drafter that finds no match proposes nothing and is verified with a 1-token forward, which a
"k drafts every step" profile cannot express. Traces keep both.

Sampling (temperature > 0) is not covered: acceptance is then random, and traces assume greedy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specnb.errors import ParameterError

LOOKUP_CAP = 16  # longest prompt-lookup proposal a trace records (γ beyond this is extrapolated)


# ---------------------------------------------------------------------------- per-position profile


@dataclass
class AcceptanceProfile:
    """Counts per position i = 1..gamma: how often position i was *reached* (drafted with every
    earlier position accepted) and accepted, pooled and per prompt (rows of ``per_prompt``)."""

    gamma: int
    reached: list[int]
    accepted: list[int]
    per_prompt: list[dict] = field(default_factory=list)  # {"prompt_id", "reached", "accepted"}

    def conditional(self) -> np.ndarray:
        """a_i = accepted_i / reached_i; an unreached position repeats the one before it."""
        return rates(np.asarray(self.accepted, float), np.asarray(self.reached, float))

    def alpha_iid(self) -> float:
        """The i.i.d. α that best explains the counts (pooled accepted ÷ reached): the maximum
        likelihood α of the geometric model Leviathan et al. assume."""
        reached = sum(self.reached)
        return sum(self.accepted) / reached if reached else 0.0

    def to_frame(self) -> pd.DataFrame:
        cond = self.conditional()
        return pd.DataFrame({"position": np.arange(1, self.gamma + 1), "reached": self.reached,
                             "accepted": self.accepted, "conditional_rate": cond,
                             "rate": np.cumprod(cond)})


def rates(accepted: np.ndarray, reached: np.ndarray) -> np.ndarray:
    """accepted ÷ reached per position; positions never reached repeat the previous rate (0 at first)."""
    out = np.zeros(len(reached))
    for i, (a, r) in enumerate(zip(accepted, reached)):
        out[i] = a / r if r > 0 else (out[i - 1] if i else 0.0)
    return np.clip(out, 0.0, 1.0)


def counts_from_positions(accepted_by_position, drafted_by_position) -> tuple[list[int], list[int]]:
    """(reached, accepted) from per-position counts of a run (``bench`` records).

    reached_i = min(accepted_{i-1}, drafted_i): a step reaches position i when it accepted i − 1
    and drafted i (drafts shrink only in the last steps, so the min is exact but for those).
    """
    acc = [int(a) for a in accepted_by_position]
    drafted = [int(d) for d in drafted_by_position]
    reached = [drafted[0]] + [min(acc[i - 1], drafted[i]) for i in range(1, len(acc))] if acc else []
    return reached, acc


def profile_from_records(records: pd.DataFrame, draft: str) -> AcceptanceProfile:
    """The acceptance profile of one draft from ``bench.run_interleaved`` records, at its largest γ."""
    rows = records[(records["draft"] == draft) & (records["gamma"] > 0)]
    if rows.empty:
        raise ParameterError(f"no speculative records for draft {draft!r} to build an acceptance profile from")
    gamma = int(rows["gamma"].max())
    per_prompt = []
    for prompt_id, group in rows[rows["gamma"] == gamma].groupby("prompt_ids", sort=False):
        acc = np.sum(np.stack(group["accepted_by_position"].map(np.asarray).to_list()), axis=0)
        drafted = np.sum(np.stack(group["drafted_by_position"].map(np.asarray).to_list()), axis=0)
        reached, accepted = counts_from_positions(acc, drafted)
        per_prompt.append({"prompt_id": str(prompt_id), "reached": reached, "accepted": accepted})
    return pooled_profile(gamma, per_prompt)


def flat_profile(alpha: float, gamma: int = 8) -> AcceptanceProfile:
    """An i.i.d. profile (every a_i = α exactly), as 1000 pseudo-steps per position."""
    return AcceptanceProfile(gamma, [1000] * gamma, [round(1000 * alpha)] * gamma)


def pooled_profile(gamma: int, per_prompt: list[dict]) -> AcceptanceProfile:
    reached = np.sum([p["reached"] for p in per_prompt], axis=0).astype(int).tolist()
    accepted = np.sum([p["accepted"] for p in per_prompt], axis=0).astype(int).tolist()
    return AcceptanceProfile(gamma, reached, accepted, per_prompt)


# ---------------------------------------------------------------------------- traces


@dataclass
class AcceptanceTrace:
    """One prompt's generation seen from the draft. Index j = tokens already generated (j >= 1:
    the prefill emits token 0); a step starting there would have the draft propose ``proposed[j]``
    tokens (capped by γ) of which the first ``runs[j]`` are accepted. A model draft proposes as
    many tokens as it is asked for: ``proposed`` and ``cap`` are None."""

    prompt_id: str
    runs: list[int]  # [L]
    proposed: list[int] | None  # [L]; None: always as many as asked (a model draft)
    cap: int | None  # proposals were looked up to this many tokens (None: unlimited)
    hit_budget: bool  # the verifier stopped at max_new_tokens, not at EOS (so it could go on)

    @property
    def length(self) -> int:
        return len(self.runs)


def runs_from_matches(matches, cap: int) -> list[int]:
    """runs[j] = how many consecutive True start at j (capped): the accepted prefix of a step at j."""
    return run_lengths(np.asarray(matches, dtype=bool)[None, :], cap)[0].tolist()


def run_lengths(matches: np.ndarray, cap: int) -> np.ndarray:
    """``runs_from_matches`` for many sequences at once: matches [N, L] -> runs [N, L]."""
    runs = np.zeros((matches.shape[0], matches.shape[1] + 1), dtype=int)
    for j in range(matches.shape[1] - 1, -1, -1):
        runs[:, j] = np.where(matches[:, j], runs[:, j + 1] + 1, 0)
    return np.minimum(runs[:, :-1], cap)


def model_trace(draft, context: list[int], generated: list[int], vocab_size: int | None, prompt_id: str = "",
                hit_budget: bool = False) -> AcceptanceTrace:
    """Teacher-forced trace of a model draft: one forward over prompt + generated text."""
    import torch

    device = next(draft.parameters()).device
    ids = torch.tensor([context + generated[:-1]], device=device)  # [1, S + L - 1]
    with torch.inference_mode():
        logits = draft(input_ids=ids).logits[0, len(context) - 1:]  # [L, V]: predictions of generated[0..L-1]
    if vocab_size:
        logits = logits[:, :vocab_size]
    matches = (logits.argmax(-1).cpu() == torch.tensor(generated)).tolist()
    return AcceptanceTrace(prompt_id, runs_from_matches(matches, len(generated)), None, None, hit_budget)


def lookup_trace(drafter, context: list[int], generated: list[int], cap: int = LOOKUP_CAP, prompt_id: str = "",
                 hit_budget: bool = False) -> AcceptanceTrace:
    """What a prompt-lookup drafter would propose after every generated token, and how much of it
    matches what the verifier went on to generate."""
    runs, proposed = [0], [0]  # j = 0: the prefill's token; no step starts there
    for j in range(1, len(generated)):
        proposal = drafter.propose(context + generated[:j], cap)
        future = generated[j:j + len(proposal)]
        agree = next((i for i, (a, b) in enumerate(zip(proposal, future)) if a != b), min(len(proposal), len(future)))
        runs.append(agree)
        proposed.append(len(proposal))
    return AcceptanceTrace(prompt_id, runs, proposed, cap, hit_budget)


def measure_traces(pair, drafts: dict, prompts: pd.DataFrame, max_new_tokens: int, cap: int = LOOKUP_CAP,
                   progress: bool = True) -> dict[str, list[AcceptanceTrace]]:
    """Traces of every draft on every prompt: one greedy verifier-only generation per prompt, then
    one teacher-forced forward per model draft (or the lookup proposals) over its output."""
    from tqdm.auto import tqdm

    from specnb.decoding import encode_prompts, generate
    from specnb.lookup import PromptLookupDrafter

    eos = pair.tokenizer.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
    traces: dict[str, list[AcceptanceTrace]] = {name: [] for name in drafts}
    for _, row in tqdm(list(prompts.iterrows()), desc="acceptance traces", unit="prompt", disable=not progress):
        ids, _ = encode_prompts(pair.tokenizer, [row["prompt"]])
        result = generate(pair.verifier, ids.to(pair.device), max_new_tokens=max_new_tokens,
                          eos_token_id=pair.tokenizer.eos_token_id, vocab_size=pair.vocab_size)
        context, generated = ids[0].tolist(), result.tokens[0]
        budget = len(generated) >= max_new_tokens and generated[-1] not in eos
        for name, draft in drafts.items():
            if isinstance(draft, PromptLookupDrafter):
                trace = lookup_trace(draft, context, generated, cap, str(row["id"]), budget)
            else:
                trace = model_trace(draft, context, generated, pair.vocab_size, str(row["id"]), budget)
            traces[name].append(trace)
    return traces


# ---------------------------------------------------------------------------- replay


@dataclass
class PackedTraces:
    """Traces as padded arrays, fitted to one generation budget."""

    runs: np.ndarray  # [P, W]
    proposed: np.ndarray  # [P, W]
    lengths: np.ndarray  # [P] tokens each prompt generates within the budget
    extended: bool  # some trace was shorter than the budget without EOS and was repeated


def pack(traces: list[AcceptanceTrace], n_new: int) -> PackedTraces:
    """Truncate each trace to ``n_new`` tokens; a trace that stopped at the budget (not EOS) and is
    shorter than ``n_new`` is continued by repeating its steps after the first token (flagged)."""
    if not traces:
        raise ParameterError("no acceptance traces to replay; calibrate the draft on at least one prompt")
    runs, proposed, lengths, extended = [], [], [], False
    for t in traces:
        index = np.arange(n_new)
        if t.length < n_new and t.hit_budget and t.length > 1:
            index = np.where(index < t.length, index, 1 + (index - 1) % (t.length - 1))
            length, extended = n_new, True
        else:
            index, length = index[:min(t.length, n_new)], min(t.length, n_new)
        runs.append(np.asarray(t.runs)[index])
        proposed.append(np.asarray(t.proposed)[index] if t.proposed is not None else np.full(len(index), n_new))
        lengths.append(length)
    width = n_new + 1
    return PackedTraces(np.stack([np.pad(r, (0, width - len(r))) for r in runs]),
                        np.stack([np.pad(p, (0, width - len(p))) for p in proposed]),
                        np.asarray(lengths), extended)


def flat_traces(alpha: float, n_new: int, n_traces: int = 64, seed: int = 0) -> list[AcceptanceTrace]:
    """Synthetic traces of a draft whose every token is accepted independently with probability α
    (Leviathan et al.'s assumption), for what-if questions and hand-entered profiles."""
    uniforms = np.random.default_rng(seed).random((n_traces, n_new))
    return [AcceptanceTrace("flat", r.tolist(), None, None, True)
            for r in run_lengths(uniforms < alpha, n_new)]


def flat_packed(alphas, n_new: int, n_traces: int = 32, seed: int = 0) -> PackedTraces:
    """Flat-α traces for every α in ``alphas`` with common random numbers (block a holds α_a's
    ``n_traces`` traces, all thresholding the same uniforms), so a replay is monotone in α."""
    uniforms = np.random.default_rng(seed).random((n_traces, n_new))
    matches = np.concatenate([uniforms < a for a in alphas])  # [A·T, n_new]
    runs = np.pad(run_lengths(matches, n_new), ((0, 0), (0, 1)))
    return PackedTraces(runs, np.full_like(runs, n_new), np.full(len(runs), n_new), False)


@dataclass
class Replay:
    """The steps of S simulated batches of B rows; arrays over steps T (``live`` False once a batch is done)."""

    k: np.ndarray  # [T, S] drafts requested per row (γ, shrunk near the budget)
    verify_tokens: np.ndarray  # [T, S] tokens per row in the verification forward
    draft_width: np.ndarray  # [T, S] tokens in the draft's first (catch-up) forward: 1, or 2 after a full accept
    live: np.ndarray  # [T, S]
    active: np.ndarray  # [T, S, B] rows still generating
    accepted: np.ndarray  # [T, S, B] accepted draft tokens per row (0 for finished rows)
    drafted: np.ndarray  # [T, S, B]
    lengths: np.ndarray  # [S] the longest row: verifier-only takes lengths − 1 forwards after prefill

    @property
    def steps(self) -> np.ndarray:
        return self.live.sum(0)


def replay(packed: PackedTraces, rows: np.ndarray, gamma: int, n_new: int) -> Replay:
    """Speculative decoding of batches ``rows`` [S, B] (indices into the traces), step by step as
    ``decoding.decode_speculative`` does it: k = min(γ, max remaining budget − 1) drafts; row i
    drafts min(proposed, k), accepts min(run, drafted) and emits that + 1; the verifier checks
    the longest proposal + 1 tokens; a batch runs until every row has its tokens."""
    runs, proposed, lengths = packed.runs[rows], packed.proposed[rows], packed.lengths[rows]  # [S,B,W] [S,B,W] [S,B]
    pos = np.ones_like(lengths)  # tokens emitted per row: the prefill's first
    width = np.ones(len(rows))
    out = {key: [] for key in ("k", "verify_tokens", "draft_width", "live", "active", "accepted", "drafted")}
    for _ in range(n_new):
        active = pos < lengths  # [S, B]
        live = active.any(1)  # [S]
        if not live.any():
            break
        k = np.clip(np.minimum(gamma, np.where(active, n_new - pos, 0).max(1) - 1), 0, None)  # [S]
        at = np.minimum(pos, runs.shape[2] - 1)[..., None]
        drafted = np.where(active, np.minimum(np.take_along_axis(proposed, at, 2)[..., 0], k[:, None]), 0)
        accepted = np.minimum(np.take_along_axis(runs, at, 2)[..., 0], drafted)  # [S, B]
        for key, value in (("k", k), ("verify_tokens", drafted.max(1) + 1), ("draft_width", width),
                           ("live", live), ("active", active), ("accepted", accepted), ("drafted", drafted)):
            out[key].append(value)
        pos = np.where(active, np.minimum(pos + accepted + 1, lengths), pos)
        width = np.where(((accepted == k[:, None]) & (k[:, None] > 0) & active).any(1), 2.0, 1.0)
    per_row = ("active", "accepted", "drafted")  # [T, S, B]; the others are [T, S]
    arrays = {key: np.stack(v) if v else np.zeros((0, *rows.shape[:2 if key in per_row else 1]),
                                                  dtype=bool if key in ("live", "active") else int)
              for key, v in out.items()}
    return Replay(**arrays, lengths=lengths.max(1))


def emitted_per_step(accepted_steps, length: int) -> list[int]:
    """Tokens each step of one row emits: accepted + 1, cut at the row's end (``length`` tokens,
    the prefill's included). The engine also counts drafts accepted past the end (EOS or budget),
    which emit nothing and which a trace cannot see, so steps are compared by what they emit."""
    out, pos = [], 1
    for n in accepted_steps:
        out.append(int(min(n + 1, length - pos)))
        pos += out[-1]
    return out


def profile_from_traces(traces: list[AcceptanceTrace], gamma: int, n_new: int) -> AcceptanceProfile:
    """The per-position profile a batch-1 run at ``gamma`` would report (replayed, per prompt)."""
    packed = pack(traces, n_new)
    got = replay(packed, np.arange(len(traces))[:, None], gamma, n_new)
    positions = np.arange(1, gamma + 1)[None, None, :]  # [1, 1, γ]
    acc, drafted = got.accepted[:, :, 0, None], got.drafted[:, :, 0, None]  # [T, P, 1]
    reached = ((drafted >= positions) & (acc >= positions - 1)).sum(0)  # [P, γ]
    accepted = (acc >= positions).sum(0)
    per_prompt = [{"prompt_id": t.prompt_id, "reached": r.tolist(), "accepted": a.tolist()}
                  for t, r, a in zip(traces, reached, accepted)]
    return pooled_profile(gamma, per_prompt)
