"""The shipped prompt set and reading prompts from the user's files."""

import json

import pytest

from specnb.core.errors import ParameterError
from specnb.measure.prompts import (
    categories,
    load_prompts,
    read_jsonl_prompts,
    read_prompt_file,
    select_prompts,
)

COPY_HEAVY = ("summarisation", "extraction")


def test_prompt_set_is_well_formed():
    frame = load_prompts()
    assert list(frame.columns) == ["id", "category", "prompt"]
    assert 70 <= len(frame) <= 100 and frame["id"].is_unique
    assert all(i.startswith(f"{c}-") for i, c in zip(frame["id"], frame["category"]))
    assert frame["prompt"].str.strip().str.len().min() > 10
    assert set(categories()) >= {"code", "writing", "qa", "math", "translation", "conversation", *COPY_HEAVY}
    assert frame["category"].value_counts().min() >= 5


def test_copy_heavy_prompts_carry_their_source_text():
    frame = load_prompts(list(COPY_HEAVY))
    assert (frame["prompt"].str.contains("\n\n")).all()  # instruction, blank line, source passage
    assert frame["prompt"].str.len().median() > 150


def test_load_prompts_filters_and_limits():
    frame = load_prompts(["code", "math"], limit_per_category=2)
    assert list(frame["id"]) == ["code-01", "code-02", "math-01", "math-02"]
    assert list(load_prompts("qa")["category"].unique()) == ["qa"]
    with pytest.raises(ParameterError, match="unknown prompt categories.*known: code"):
        load_prompts(["poetry"])
    with pytest.raises(ParameterError, match=">= 1"):
        load_prompts(limit_per_category=0)


def test_select_prompts_specs():
    assert len(select_prompts("all")) == len(load_prompts())
    assert set(select_prompts("qa, math")["category"]) == {"qa", "math"}
    few = select_prompts("all", n=len(categories()))
    assert sorted(few["category"]) == sorted(categories())  # round-robin: one per category
    with pytest.raises(ParameterError, match="unknown prompt categories"):
        select_prompts("qa,poetry")
    with pytest.raises(ParameterError, match=">= 1"):
        select_prompts("qa", n=0)


def test_prompt_file_one_per_line(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("First prompt\n\n  \nSecond prompt  \nDrittes: Übersetzung\n", encoding="utf-8")
    assert read_prompt_file(path) == ["First prompt", "Second prompt", "Drittes: Übersetzung"]
    frame = select_prompts(str(path), n=2)
    assert list(frame["id"]) == ["file-01", "file-02"] and set(frame["category"]) == {"file"}


@pytest.mark.parametrize("content, message", [(None, "does not exist"), (b"", "has no prompts"),
                                              (b"\n  \n", "has no prompts"), (b"ok\n\xff\xfe bad\n", "not UTF-8")])
def test_bad_prompt_files(tmp_path, content, message):
    path = tmp_path / "prompts.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ParameterError, match=message):
        read_prompt_file(path)
    with pytest.raises(ParameterError, match=message):
        select_prompts(str(path))


def test_a_jsonl_file_is_read_by_its_prompt_field(tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [{"prompt": "Summarise: the cat sat.", "category": "summarisation"}, {"prompt": " Zähle bis drei. "},
            {"prompt": "Sum 2 and 3.", "category": "math", "id": "ignored"}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows[:2]) + "\n\n" + json.dumps(rows[2]),
                    encoding="utf-8")
    frame = select_prompts(str(path))
    assert list(frame["prompt"]) == ["Summarise: the cat sat.", "Zähle bis drei.", "Sum 2 and 3."]
    assert list(frame["category"]) == ["summarisation", "file", "math"]
    assert list(frame["id"]) == ["file-01", "file-02", "file-03"]
    assert list(select_prompts(str(path), n=2)["category"]) == ["summarisation", "file"]  # round-robin


def test_the_shipped_prompt_set_is_a_valid_jsonl_prompt_file():
    from specnb.core.paths import PROMPTS_FILE

    frame = read_jsonl_prompts(PROMPTS_FILE)
    assert list(frame["prompt"]) == list(load_prompts()["prompt"])
    assert list(frame["category"]) == list(load_prompts()["category"])


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "ok"}\n{"prompt": "broken",\n', "line 2 is not JSON"),
    ('{"prompt": "ok"}\n{"text": "no prompt field"}\n', 'line 2 has no "prompt" string'),
    ('["a list"]\n', 'line 1 has no "prompt" string'),
    ('{"prompt": "   "}\n', 'line 1 has no "prompt" string'),
    ("\n\n", "has no prompts"),
])
def test_a_bad_jsonl_line_is_one_parameter_error(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ParameterError, match=message) as caught:
        select_prompts(str(path))
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_a_number_is_not_a_prompt_spec():
    with pytest.raises(ParameterError, match="n_prompts"):
        select_prompts(8)
