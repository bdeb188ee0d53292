"""Task templates: `{node.field}` placeholders in a node's task.

`{node.field}` (or `{node.a.b}`) stands for a field of an earlier node's result;
`{{` and `}}` are literal braces. The workflow loader checks every template when
the file loads (`parse_template`); the run fills them in (`render_task`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crw.text import replace_surrogates

SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_FIELD = r"[A-Za-z0-9_-]+"
_PLACEHOLDER = re.compile(rf"({SLUG.pattern})\.({_FIELD}(?:\.{_FIELD})*)")
_BRACE = re.compile(r"[{}]")


class TemplateError(ValueError):
    """A task template that does not parse: `what` went wrong, `fix` says how to mend it."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what}; {fix}")
        self.what = what
        self.fix = fix


@dataclass(frozen=True)
class Placeholder:
    """`{node.field}` (or `{node.a.b}`): a field of an earlier node's result."""

    node: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        return "{" + ".".join((self.node, *self.path)) + "}"


def parse_template(text: str) -> list[str | Placeholder]:
    """Split a task into literal text and placeholders; `{{` and `}}` are literal braces.

    Raises:
        TemplateError: an unclosed `{`, a lone `}`, or a placeholder not `{node.field}`.
    """
    if "{" not in text and "}" not in text:  # most tasks: text alone, in one piece
        return [text] if text else []
    parts: list[str | Placeholder] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if text.startswith("{{", i) or text.startswith("}}", i):
            literal.append(char)
            i += 2
        elif char == "}":
            raise TemplateError(
                f"task has a lone '}}' at character {i + 1}", "write '}}' for a literal brace"
            )
        elif char == "{":
            end = text.find("}", i)
            inner = text[i + 1 : end] if end >= 0 else text[i + 1 :]
            found = _PLACEHOLDER.fullmatch(inner)
            if end < 0 or found is None:
                shown = text[i : end + 1] if end >= 0 else text[i : i + 20]
                raise TemplateError(
                    f"task placeholder {shown} at character {i + 1} is not {{node.field}}",
                    "write {node.field}, or '{{' and '}}' for literal braces",
                )
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(Placeholder(found.group(1), tuple(found.group(2).split("."))))
            i = end + 1
        else:  # the text up to the next brace, at once: a task is mostly text
            brace = _BRACE.search(text, i)
            end = brace.start() if brace is not None else len(text)
            literal.append(text[i:end])
            i = end
    if literal:
        parts.append("".join(literal))
    return parts


def render_task(task: str, results: Mapping[str, Any]) -> str:
    """The task with each `{node.field}` replaced by that field of `results[node]`.

    A string is inserted as it is, any other value as JSON; a field the result
    does not have is `null`. The template was checked when the workflow loaded.
    The task goes to a subagent, which takes only Unicode: a lone surrogate of a
    result (an answer's `\\ud800`) is inserted as U+FFFD.
    """
    out: list[str] = []
    for part in parse_template(task):
        if isinstance(part, str):
            out.append(part)
            continue
        value: Any = results.get(part.node)
        for key in part.path:
            value = value.get(key) if isinstance(value, Mapping) else None
        out.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return replace_surrogates("".join(out))
