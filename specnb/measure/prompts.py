"""The evaluation prompt set, and reading the user's own prompts.

Acceptance depends on what is being generated, so the set spans categories that behave
differently under speculation (Spec-Bench, Xia et al. 2024, groups its prompts the same way):
summarisation and extraction copy long spans of the prompt (prompt lookup shines there), code
and math are predictable, open-ended writing and conversation are not, and translation sits in
between. Prompts are plain user messages; chat templating happens in
``specnb.decode.inputs.encode_prompts``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from specnb.core.errors import ParameterError
from specnb.core.paths import PROMPTS_FILE

COLUMNS = ["id", "category", "prompt"]


def read_prompt_set(path: Path = PROMPTS_FILE) -> pd.DataFrame:
    """Every shipped prompt, one row each, in file order."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return pd.DataFrame(rows, columns=COLUMNS)


def categories() -> list[str]:
    """Category names in the order they appear in the prompt set."""
    return list(dict.fromkeys(read_prompt_set()["category"]))


def load_prompts(categories: list[str] | str | None = None, limit_per_category: int | None = None) -> pd.DataFrame:
    """Shipped prompts (columns id, category, prompt), optionally some categories and the first
    ``limit_per_category`` of each."""
    frame = read_prompt_set()
    if categories is not None:
        wanted = [categories] if isinstance(categories, str) else list(categories)
        check_categories(wanted, list(dict.fromkeys(frame["category"])))
        frame = frame[frame["category"].isin(wanted)]
    if limit_per_category is not None:
        if limit_per_category < 1:
            raise ParameterError(f"limit_per_category must be >= 1, got {limit_per_category}")
        frame = frame.groupby("category", sort=False).head(limit_per_category)
    return frame.reset_index(drop=True)


def check_categories(wanted: list[str], known: list[str]) -> None:
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise ParameterError(f"unknown prompt categories {unknown}; known: {', '.join(known)} (or all, or a file path)")


def read_text_file(path: str | Path, kind: str) -> str:
    """A prompt file's text: it must exist and be UTF-8 (``kind`` says what its lines hold, for the error)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ParameterError(f"prompt file {str(path)!r} does not exist; pass a text file with {kind}")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ParameterError(f"prompt file {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start}); "
                             f"save it as UTF-8 with {kind}") from None


def read_prompt_file(path: str | Path) -> list[str]:
    """One prompt per line of a UTF-8 text file; blank lines are skipped."""
    text = read_text_file(path, "one prompt per line")
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ParameterError(f"prompt file {str(path)!r} has no prompts; write one prompt per line")
    return prompts


def read_jsonl_prompts(path: str | Path) -> pd.DataFrame:
    """A JSON Lines file, one object per line with a ``prompt`` string (and, optionally, a ``category``:
    prompts are then taken round-robin over categories, as the shipped set is); blank lines are skipped.
    The shipped ``prompts.jsonl`` has this shape, so a copy of it, edited, is a valid file."""
    kind = 'one JSON object with a "prompt" field per line'
    rows = []
    for number, line in enumerate(read_text_file(path, kind).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ParameterError(f"prompt file {str(path)!r} line {number} is not JSON ({err.msg}); write "
                                 f"{kind}") from None
        text = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ParameterError(f"prompt file {str(path)!r} line {number} has no \"prompt\" string; write {kind}")
        rows.append({"category": str(row.get("category") or "file"), "prompt": text.strip()})
    if not rows:
        raise ParameterError(f"prompt file {str(path)!r} has no prompts; write {kind}")
    ids = [f"file-{i:02d}" for i in range(1, len(rows) + 1)]
    return pd.DataFrame(rows).assign(id=ids)[COLUMNS]


def read_prompts(path: str | Path) -> pd.DataFrame:
    """A user's prompt file as a prompt frame: ``.jsonl`` by ``read_jsonl_prompts``, anything else one
    prompt per line (ids ``file-01``..., category ``file``)."""
    if Path(path).suffix.lower() == ".jsonl":
        return read_jsonl_prompts(path)
    texts = read_prompt_file(path)
    return pd.DataFrame({"id": [f"file-{i:02d}" for i in range(1, len(texts) + 1)], "category": "file",
                         "prompt": texts}, columns=COLUMNS)


def select_prompts(spec: str, n: int | None = None) -> pd.DataFrame:
    """Prompts for ``--prompts SPEC``: a category, ``cat1,cat2``, ``all``, or a file path (``read_prompts``:
    a ``.jsonl`` file with a ``prompt`` field per line, else one prompt per line; rows get ids
    ``file-01``...). ``n`` caps the total, taken round-robin over the categories so a small ``n`` still
    covers every chosen category."""
    if n is not None and n < 1:
        raise ParameterError(f"number of prompts must be >= 1, got {n}")
    spec = str(spec) if isinstance(spec, Path) else spec
    if not isinstance(spec, str):
        raise ParameterError(f"prompts must be a string: a category, cat1,cat2, all, or a file path, got {spec!r}; "
                             "the number of prompts is a parameter of its own (n_prompts)")
    if looks_like_path(spec):
        frame = read_prompts(spec)
    else:
        wanted = None if spec.strip() == "all" else [c.strip() for c in spec.split(",") if c.strip()]
        if wanted == []:
            raise ParameterError("empty prompt selection; pass a category, cat1,cat2, all, or a file path")
        frame = load_prompts(wanted)
    if n is not None:
        rank = frame.groupby("category", sort=False).cumcount()
        frame = frame.assign(_rank=rank).sort_values("_rank", kind="stable").head(n).drop(columns="_rank")
    return frame.reset_index(drop=True)


def looks_like_path(spec: str) -> bool:
    """A spec is a file when it exists or is written like one (a folder separator or an extension)."""
    return Path(spec).expanduser().exists() or "/" in spec or "\\" in spec or Path(spec).suffix != ""


def as_prompt_frame(prompts) -> pd.DataFrame:
    """A DataFrame with id, category, prompt from such a frame or from a list of strings."""
    if isinstance(prompts, pd.DataFrame):
        missing = {"id", "category", "prompt"} - set(prompts.columns)
        if missing:
            raise ParameterError(f"prompt frame lacks columns {sorted(missing)}; use "
                                 "specnb.measure.prompts.load_prompts()")
        return prompts.reset_index(drop=True)
    texts = [str(p) for p in prompts]
    return pd.DataFrame({"id": [f"p{i:02d}" for i in range(len(texts))], "category": "custom", "prompt": texts})


def batches_of(frame: pd.DataFrame, batch_size: int) -> list[pd.DataFrame]:
    """Consecutive batches; the last one may be smaller."""
    if batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
    return [frame.iloc[i:i + batch_size] for i in range(0, len(frame), batch_size)]


def split_prompts(
    spec: str = "all", n_calibration: int = 3, n_validation: int = 4
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Disjoint calibration and validation prompts with the same mix of categories: within each
    category the prompts alternate between the two pools, each pool is taken round-robin over the
    categories, and when validation needs fewer prompts than there are categories both pools keep
    only the categories validation covers. Why: acceptance differs far more between categories
    than within one (prompt lookup copies from summaries and extractions, not from translations),
    so calibrating on one mix and validating on another measures the mixes, not the predictor."""
    if n_calibration < 1 or n_validation < 0:
        raise ParameterError(
            f"need >= 1 calibration prompt and >= 0 validation prompts, got {n_calibration}, {n_validation}"
        )
    frame = select_prompts(spec)
    categories = list(dict.fromkeys(frame["category"]))
    if 0 < n_validation < len(categories):
        frame = frame[frame["category"].isin(categories[:n_validation])]
    rank = frame.groupby("category", sort=False).cumcount()  # 0, 1, 2, ... within each category
    frame = frame.assign(_pool=rank % 2, _rank=rank // 2).sort_values("_rank", kind="stable")
    pools = [frame[frame["_pool"] == k].drop(columns=["_pool", "_rank"]).reset_index(drop=True) for k in (0, 1)]
    if len(pools[0]) < n_calibration or len(pools[1]) < n_validation:
        raise ParameterError(
            f"prompts {spec!r} give {len(pools[0])} calibration and {len(pools[1])} validation "
            "prompts "
            f"(alternating within categories); need {n_calibration} + {n_validation}"
        )
    return pools[0].iloc[:n_calibration], pools[1].iloc[:n_validation]


def prompt_tokens(tokenizer, prompts: pd.DataFrame, batch_size: int = 1) -> float:
    """Mean prefill width: the longest (chat-templated) prompt of each batch, averaged over batches."""
    import numpy as np

    from specnb.decode.inputs import encode_prompts  # deferred: loads torch

    widths = [encode_prompts(tokenizer, list(b["prompt"]))[0].shape[1] for b in batches_of(prompts, batch_size)]
    return float(np.mean(widths))


def batch_prompts(spec, batch_size: int) -> pd.DataFrame:
    """Prompts to cut into batches: ``spec`` None (``batch_size`` prompts round-robin over every
    category), a number of such prompts, or what ``select_prompts`` takes; at least one full batch."""
    frame = (
        select_prompts("all", spec or batch_size)
        if spec is None or isinstance(spec, int)
        else select_prompts(str(spec))
    )
    if len(frame) < batch_size:
        raise ParameterError(f"{len(frame)} prompts cannot fill a batch of {batch_size}; pass more prompts")
    return frame
