"""A workflow's run inputs: the `[inputs.NAME]` tables and the values a start gives them.

    [inputs.issue]
    type = "file"                      # string (the default), int, bool or file
    description = "the issue to fix"
    [inputs.attempts]
    type = "int"
    default = 2                        # an input with a default is not required

A task names an input as `{inputs.NAME}`, as it names a node's result: `inputs` is
no node's id. `fill_inputs` is what `crw flow start --input NAME=VALUE --input-file
NAME=PATH` (and `validate`) checks before any run exists: each value given names a
declared input and reads as its type, each required input has one. A file input's
value is the file's text, recorded by its path and content digest (`RunInput`);
the run keeps its own copy, so a resume renders the same task whatever the file
became. Refusals are one line naming the input and its line in the workflow.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, model_validator

from crw.engine.config._tomlsource import (
    UnreadableFile,
    crw_error,
    one_line,
    read_regular_file,
)
from crw.errors import InputError

INPUTS = "inputs"
"""The reserved node id a task names the run's inputs by (`{inputs.NAME}`)."""

INPUT_KEYS = ("type", "required", "default", "description")

InputType = Literal["string", "int", "bool", "file"]


class InputDecl(BaseModel):
    """One `[inputs.NAME]` table. `required`: a start without a value is refused
    (by default, when the input has no default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: InputType = "string"
    required: StrictBool | None = None
    default: StrictBool | StrictInt | StrictStr | None = None
    description: StrictStr = ""

    @model_validator(mode="after")
    def _default_fits(self) -> InputDecl:
        if self.default is not None:
            problem = _type_problem(self.type, self.default)
            if problem is not None:
                raise crw_error(f"default = {json.dumps(self.default)} {problem}", _FIX[self.type])
            if self.required:
                raise crw_error(
                    "required = true beside a default, which is never missing",
                    "drop required or the default",
                )
        return self

    @property
    def needed(self) -> bool:
        """A start must give it a value."""
        return self.required if self.required is not None else self.default is None


_FIX = {
    "string": 'write it as a string, e.g. default = "text"',
    "int": "write it as an integer, e.g. default = 3",
    "bool": "write it as true or false",
    "file": 'give a file\'s path relative to the workflow file, e.g. default = "issue.md"',
}


def _type_problem(kind: str, value: object) -> str | None:
    """Why `value` (as TOML gives it) is not a default of an input of type `kind`."""
    wanted = {"string": str, "file": str, "int": int, "bool": bool}[kind]
    if (isinstance(value, bool) and kind != "bool") or not isinstance(value, wanted):
        return "is not an integer" if kind == "int" else f"is not a {kind}"
    return None


@dataclass(frozen=True)
class RunInput:
    """An input's value as the run records it: `value` for string, int and bool;
    for a file, its absolute `path`, the `digest` of its bytes and its `text`."""

    value: str | int | bool | None = None
    path: str | None = None
    digest: str | None = None
    text: str | None = None

    def recorded(self) -> Any:
        """The value in run.json and the started row (a file by path and digest)."""
        if self.path is None:
            return self.value
        return {"path": self.path, "digest": self.digest}


def parse_pairs(given: Sequence[str], flag: str) -> dict[str, str]:
    """`NAME=VALUE` arguments of `flag` (`--input`, `--input-file`), each name once.

    Raises:
        InputError: an argument without `=`, or a name given twice (which value was
            meant is the user's to say).
    """
    out: dict[str, str] = {}
    for pair in given:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InputError(
                f"{flag} {json.dumps(pair)} is not NAME=VALUE; write it as {flag} NAME=VALUE"
            )
        if name in out:
            raise InputError(
                f"{flag} {name} is given twice ({json.dumps(out[name])} and "
                f"{json.dumps(value)}); give each input once"
            )
        out[name] = value
    return out


def fill_inputs(
    file: str,
    declared: Mapping[str, InputDecl],
    lines: Mapping[str, int],
    values: Mapping[str, str],
    files: Mapping[str, str],
    cwd: Path,
) -> dict[str, RunInput]:
    """The run's inputs: each declared input's value from `values` (`--input`), `files`
    (`--input-file`, a path relative to `cwd`) or its default (a file default is
    relative to the workflow `file`). Reads the files given.

    Raises:
        InputError: one line `<file>:<line>: input 'NAME': <what>; <fix>` for a name
            the workflow does not declare, a value that is not of its type, a
            required input without one, or a file that cannot be read as UTF-8.
    """
    for name in (*values, *files):
        if name not in declared:
            known = ", ".join(declared) or "none (add an [inputs.NAME] table)"
            raise one_line(file, None, f"no input '{name}' is declared", f"use one of: {known}")
    out: dict[str, RunInput] = {}
    for name, decl in declared.items():

        def refuse(what: str, fix: str, name: str = name) -> InputError:
            return one_line(file, lines.get(name), f"input '{name}': {what}", fix)

        given_file = name in files
        if name in values and decl.type == "file":
            raise refuse("is a file", f"give it as --input-file {name}=PATH")
        if given_file and decl.type != "file":
            raise refuse(f"is a {decl.type}, not a file", f"give it as --input {name}=VALUE")
        if name in values:
            out[name] = RunInput(value=_read_value(decl.type, values[name], refuse))
        elif given_file:
            out[name] = _read_file(cwd / files[name], refuse)
        elif decl.default is not None:
            if decl.type == "file":
                out[name] = _read_file(Path(file).parent / str(decl.default), refuse)
            else:
                out[name] = RunInput(value=decl.default)
        elif decl.needed:
            flag = f"--input-file {name}=PATH" if decl.type == "file" else f"--input {name}=VALUE"
            about = f" ({decl.description})" if decl.description else ""
            raise refuse(f"is required and has no value{about}", f"give it: {flag}")
    return out


def refill_inputs(
    file: str,
    declared: Mapping[str, InputDecl],
    lines: Mapping[str, int],
    recorded: Mapping[str, RunInput],
    values: Mapping[str, str],
    files: Mapping[str, str],
    cwd: Path,
) -> dict[str, RunInput]:
    """A rerun's inputs: the source run's `recorded` ones, each that `values` or
    `files` names given anew, an input the workflow declares and the source had
    not filled as `fill_inputs` fills it; a recorded input the workflow no longer
    declares is dropped.

    Raises:
        InputError: as `fill_inputs`.
    """
    for name in (*values, *files):
        if name not in declared:
            known = ", ".join(declared) or "none (add an [inputs.NAME] table)"
            raise one_line(file, None, f"no input '{name}' is declared", f"use one of: {known}")
    given = {*values, *files}
    kept = {name: value for name, value in recorded.items() if name in declared}
    kept = {name: value for name, value in kept.items() if name not in given}
    anew = {name: decl for name, decl in declared.items() if name not in kept}
    filled = kept | fill_inputs(file, anew, lines, values, files, cwd)
    return {name: filled[name] for name in declared if name in filled}


def _read_value(kind: str, text: str, refuse: Any) -> str | int | bool:
    if kind == "int":
        try:
            return int(text, 10)
        except ValueError:
            raise refuse(f"{json.dumps(text)} is not an integer", "give a whole number") from None
    if kind == "bool":
        if text not in ("true", "false"):
            raise refuse(f"{json.dumps(text)} is not a bool", "give true or false")
        return text == "true"
    return text


def _read_file(path: Path, refuse: Any) -> RunInput:
    try:
        data = read_regular_file(path, "input file")
    except FileNotFoundError:
        raise refuse(f"no file {path}", "check the path") from None
    except UnreadableFile as err:
        raise refuse(f"{err.what} ({path})", err.fix) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise refuse(f"{path} is not UTF-8 text (byte {err.start})", "give a text file") from None
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return RunInput(path=str(path.resolve()), digest=digest, text=text)
