"""The edits captured tool output suffers, as a hypothesis strategy every parser fuzz test uses."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def mutated(draw: st.DrawFn, text: str) -> str:
    """One to three edits of the kinds real captures suffer: lines lost, doubled, cut, shuffled,
    or bytes garbled."""
    lines = text.splitlines(keepends=True) or [""]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["delete", "duplicate", "truncate", "reorder", "bytes"]))
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if kind == "delete" and lines:
            j = draw(st.integers(i, min(len(lines), i + 5)))
            del lines[i:j]
        elif kind == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif kind == "truncate":
            joined = "".join(lines)
            cut = draw(st.integers(0, len(joined)))
            lines = joined[:cut].splitlines(keepends=True)
        elif kind == "reorder" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "bytes":
            noise = draw(st.binary(min_size=1, max_size=12)).decode("latin-1")
            line = lines[i] if lines else ""
            at = draw(st.integers(0, len(line)))
            replace = draw(st.booleans())
            lines[i : i + 1] = [line[:at] + noise + line[at + len(noise) * replace :]]
        lines = lines or [""]
    return "".join(lines)
