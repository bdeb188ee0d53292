"""The spawn hook in `$CODEX_HOME/config.toml`: its PreToolUse entry and its trust.

The entry is the shape host-protocol.md (Hooks) shows, appended after whatever the
user's file holds, which stays as it was, byte for byte:

    [[hooks.PreToolUse]]

    [[hooks.PreToolUse.hooks]]
    type = "command"
    command = "/path/to/crw flow hook spawn"
    timeout = 30

Codex runs a hook only once trusted: `[hooks.state."<key>"] trusted_hash =
"<currentHash>"`, the key and hash as the app-server's `hooks/list` shows them.
Every edit is checked by reading the new text back as TOML before it replaces the
file (atomically, keeping the file's mode; a symbolic link is written through, onto
its target), and an edit that would not read back as intended is refused, naming
what to write by hand. A spawn hook entry whose command differs from the one an
install writes (another venv, another `--state`) is updated to it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli

from crw.errors import InputError, RefusedError

HOOK_TIMEOUT = 30
SPAWN_ARGS = ("flow", "hook", "spawn")


def crw_command(state: str | None) -> str:
    """The hook's command line: the `crw` script beside this Python, else this Python
    running `-m crw`, then `flow hook spawn` (and `--state DIR` when given)."""
    script = Path(sys.executable).parent / "crw"
    head = [str(script)] if script.is_file() else [sys.executable, "-m", "crw"]
    tail = ["--state", str(Path(state).absolute())] if state else []
    return shlex.join([*head, *SPAWN_ARGS, *tail])


@dataclass(frozen=True)
class Config:
    """config.toml as read: its text (empty when missing) and what it parses to."""

    path: Path
    text: str
    data: dict[str, Any]


def read_config(path: Path) -> Config:
    """Raises InputError: the file is not TOML (nothing is changed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read {path}: {err}; make it a readable UTF-8 file") from err
    return Config(path, text, _parse(path, text))


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomli.loads(text)
    except tomli.TOMLDecodeError as err:
        raise InputError(f"{path} is not TOML ({err}); fix it, then install again") from err


def spawn_hooks(data: dict[str, Any]) -> list[str]:
    """The commands of the PreToolUse command hooks that run `crw ... flow hook spawn`."""
    found = []
    for group in _list(data.get("hooks", {}), "PreToolUse"):
        for hook in _list(group, "hooks"):
            command = hook.get("command") if isinstance(hook, dict) else None
            if not isinstance(command, str) or " ".join(SPAWN_ARGS) not in command:
                continue
            if hook.get("type") == "command":
                found.append(command)
    return found


def _list(table: object, key: str) -> list[Any]:
    value = table.get(key) if isinstance(table, dict) else None
    return value if isinstance(value, list) else []


def hook_entry(command: str) -> str:
    """The hook's entry as TOML tables, the text an install appends (a document
    of its own: it parses alone)."""
    return (
        "# The crw flow spawn hook (crw flow hook install).\n[[hooks.PreToolUse]]\n\n"
        f'[[hooks.PreToolUse.hooks]]\ntype = "command"\ncommand = {json.dumps(command)}\n'
        f"timeout = {HOOK_TIMEOUT}\n"
    )


class ByHand(RefusedError):
    """An edit install cannot make to config.toml; `entry` is the TOML to add by hand."""

    def __init__(self, message: str, entry: str) -> None:
        super().__init__(message)
        self.entry = entry


def with_hook(config: Config, command: str) -> str:
    """The text with the hook's entry appended.

    Raises:
        ByHand: the entry cannot be appended to this file (its PreToolUse hooks
            are written as an inline array, say).
    """
    entry = hook_entry(command)
    text = joined(config.text, f"\n{entry}" if config.text else entry)
    if reads_back(text, lambda data: command in spawn_hooks(data)):
        return text
    raise ByHand(
        f"cannot append the spawn hook to {config.path}: its hooks are not written as "
        "[[hooks.PreToolUse]] tables; add the entry printed on stdout by hand (as these "
        "tables, or as a group of its inline hooks.PreToolUse list)",
        entry,
    )


def with_command(config: Config, stale: list[str], command: str) -> str:
    """The text with each spawn hook entry whose command is one of `stale` running
    `command` instead, the rest of the file as it was.

    Raises:
        RefusedError: a stale command is not written as a plain TOML string, so the
            edit would not read back as intended.
    """
    text = config.text
    for old in dict.fromkeys(stale):
        written = [json.dumps(old)] + ([f"'{old}'"] if "'" not in old else [])
        pattern = "|".join(re.escape(one) for one in written)
        text = re.sub(
            rf"(\bcommand[ \t]*=[ \t]*)(?:{pattern})",
            lambda found: found.group(1) + json.dumps(command),
            text,
        )
    if reads_back(text, lambda data: set(spawn_hooks(data)) == {command}):
        return text
    raise RefusedError(
        f"cannot update the spawn hook in {config.path}: write "
        f"command = {json.dumps(command)} in place of {' and '.join(map(json.dumps, stale))} "
        "by hand"
    )


def with_trust(config: Config, key: str, digest: str) -> str:
    """The text with `[hooks.state."<key>"] trusted_hash = "<digest>"`: the table's
    trusted_hash line replaced when the table is there, else the table appended.

    Raises:
        RefusedError: the edit would not read back as that trust.
    """
    header = f"[hooks.state.{json.dumps(key)}]"
    line = f"trusted_hash = {json.dumps(digest)}"
    table = re.compile(
        rf"^{re.escape(header)}[ \t]*\n(?:(?!\[)[^\n]*\n)*?[ \t]*trusted_hash[ \t]*=[^\n]*$",
        re.MULTILINE,
    )
    found = table.search(config.text)
    if found is not None:
        head, _, _ = found.group().rpartition("\n")
        text = config.text[: found.start()] + f"{head}\n{line}" + config.text[found.end() :]
    else:
        text = joined(config.text, f"\n{header}\n{line}\n")
    if reads_back(text, lambda data: _trusted(data, key) == digest):
        return text
    raise RefusedError(
        f"cannot record the spawn hook's trust in {config.path}; add by hand: {header} {line}"
    )


def _trusted(data: dict[str, Any], key: str) -> object:
    state = data.get("hooks", {}).get("state", {})
    entry = state.get(key) if isinstance(state, dict) else None
    return entry.get("trusted_hash") if isinstance(entry, dict) else None


def joined(text: str, tail: str) -> str:
    return text + ("\n" if text and not text.endswith("\n") else "") + tail


def reads_back(text: str, holds: Any) -> bool:
    try:
        return bool(holds(tomli.loads(text)))
    except (tomli.TOMLDecodeError, AttributeError):
        return False


def write_config(path: Path, text: str) -> Path:
    """Replace the file with `text` in one rename, keeping its mode (0600 when new).
    A symbolic link is written through: the temporary file is made beside the
    link's target and renamed onto it, so the link stays. Returns the file written.

    Raises:
        RefusedError: the file cannot be written (nothing is changed).
    """
    target = Path(os.path.realpath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o600
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as err:
        raise _unwritten(path, target, err) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fchmod(file.fileno(), mode)
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except OSError as err:
        Path(temporary).unlink(missing_ok=True)
        raise _unwritten(path, target, err) from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _unwritten(path: Path, target: Path, err: OSError) -> RefusedError:
    link = f" (a link to {target})" if path.is_symlink() else ""
    return RefusedError(
        f"cannot write {path}{link}: {err.strerror or err}; make {target.parent} a "
        "directory you can write, then install again"
    )
