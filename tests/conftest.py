"""Shared fixtures (shared helpers, the tiny-model factory included, are in ``helpers.py``)."""

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
