"""``Report``: what a text function returns to a notebook cell, the Markdown it displays and the
values the notebook records (``specnb.app.recorder.Recorder.record``). One record for every
notebook's text, so a cell shows and records any conclusion the same way."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Report:
    """Markdown for a notebook cell plus the values it states (for ``Recorder.record``)."""

    markdown: str
    values: dict = field(default_factory=dict)

    def _repr_markdown_(self) -> str:
        return self.markdown

    def __str__(self) -> str:
        return self.markdown
