"""Where specnb's files are: the package's shipped data and the repository around it."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = PACKAGE_DIR.parent  # notebooks/ and outputs/ live here in a source checkout
DATA_DIR = PACKAGE_DIR / "data"
CONFIGS_DIR = DATA_DIR / "configs"  # config.json of models whose FLOPs work offline
DRAFTS_DIR = DATA_DIR / "drafts"  # the committed distilled drafts and heads
PROMPTS_FILE = DATA_DIR / "prompts.jsonl"  # the evaluation prompt set


def git_commit() -> str | None:
    """The checkout's commit (recorded with every result), or None outside a git checkout."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
