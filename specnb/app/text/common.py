"""Text more than one notebook shows: Markdown bullets."""

from __future__ import annotations


def bullets(lines, closing: str = "") -> str:
    return "\n".join(f"- {line}" for line in lines) + (f"\n\n{closing}" if closing else "")
