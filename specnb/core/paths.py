"""Where specnb's files are: the package's shipped data and the repository around it."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = PACKAGE_DIR.parent  # notebooks/ and outputs/ live here in a source checkout
DATA_DIR = PACKAGE_DIR / "data"
CONFIGS_DIR = DATA_DIR / "configs"  # config.json of models whose FLOPs work offline
DRAFTS_DIR = DATA_DIR / "drafts"  # the committed distilled drafts and heads
PROMPTS_FILE = DATA_DIR / "prompts.jsonl"  # the evaluation prompt set
