"""Shared fixtures (shared helpers, the tiny-model factory included, are in ``helpers.py``)."""

import os
import shutil
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run far faster on one thread: two threads spin-wait on each other's tiny matmuls
    when the cores are shared (20x slower here). Modules opt in with ``pytestmark``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pair():
    """``helpers.word_pair``: a tiny verifier over the word tokenizer, as ``load_pair`` returns it without a
    draft. A module that needs another pair (a parametrized architecture, a draft beside it) defines its own."""
    from helpers import word_pair

    return word_pair()


@pytest.fixture(scope="module")
def verifier_folder(tmp_path_factory):
    """``helpers.word_model(0)`` and the word tokenizer saved as a checkpoint folder: a verifier that
    ``load_pair`` reads by path, for heads loaded beside it."""
    from helpers import tiny_tokenizer, word_model

    folder = tmp_path_factory.mktemp("verifier")
    word_model(0).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def browser_missing(reason: str):
    """A browser test without its browser fails loudly (CI must run it), or skips with the reason under
    ``SPECNB_BROWSER_OPTIONAL=1``."""
    if os.environ.get("SPECNB_BROWSER_OPTIONAL", "").strip().lower() in ("1", "true", "yes"):
        pytest.skip(reason)
    pytest.fail(f"{reason}. Install: pip install playwright; apt-get install -y --no-install-recommends chromium "
                f"(or python -m playwright install --with-deps chromium). Or set SPECNB_BROWSER_OPTIONAL=1 to skip",
                pytrace=False)


@pytest.fixture(scope="module")
def chromium():
    """(sync_playwright, executable or None for playwright's own browser): ``$SPECNB_CHROMIUM``, playwright's
    own Chromium where ``playwright install chromium`` ran, else the system's (Debian's ``chromium``)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        browser_missing("the playwright package is not installed (pip install playwright)")
    explicit = os.environ.get("SPECNB_CHROMIUM")
    if explicit:
        if not (shutil.which(explicit) or Path(explicit).is_file()):
            browser_missing(f"SPECNB_CHROMIUM={explicit} does not exist")
        return sync_playwright, shutil.which(explicit) or explicit
    with sync_playwright() as p:
        own = p.chromium.executable_path
    if own and Path(own).is_file():
        return sync_playwright, None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return sync_playwright, found
    browser_missing("no Chromium found (apt-get install chromium, or python -m playwright install chromium)")


@pytest.fixture(autouse=True)
def own_launch_noise(monkeypatch, tmp_path_factory):
    """Launch noise a test's sweeps measure (simulated servers, short llama-server runs) is neither this
    machine's nor another test's: each test stores it in a folder of its own, which the notebooks it
    runs inherit, so no test's CI depends on which ran before it."""
    monkeypatch.setenv("SPECNB_LAUNCH_NOISE", str(tmp_path_factory.mktemp("launch-noise")))


@pytest.fixture
def fake_engine():
    """(handler, url): ``helpers.FakeEngine`` on loopback, a subclass of its own so its counts start at 0."""
    from helpers import FakeEngine, fake_server

    handler = type("Engine", (FakeEngine,), {"drafts": 0, "served": 0, "die_after": None, "refused": 0})
    with fake_server(handler) as url:
        yield handler, url
