"""run.json, the run's spec (format `crw-flow-run/1`).

The start writes it once and nothing rewrites it. `env` is optional: a spec
written before it reads as before, and a spec that has none is written without the
member. A member this crw does not know is kept (`extra="allow"`), so a spec
written by a later crw reads and writes back unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, MutableMapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from crw.engine.run.tmploc import recorded_problem
from crw.errors import InputError, RefusedError
from crw.settings import Settings, file_limit

if TYPE_CHECKING:
    from crw.journal.replay import RunState

FORMAT: Final = "crw-flow-run/1"

Backend = Literal["session", "app-server"]


class WorkflowRef(BaseModel):
    """The workflow file the run was started from and the sha256 of its bytes."""

    model_config = ConfigDict(extra="allow", frozen=True)

    path: str
    digest: str


class RunEnv(BaseModel):
    """The variables of the starting environment the run records: TMPDIR only (CRW-1570)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    TMPDIR: str


class RerunOf(BaseModel):
    """A rerun's source (`crw flow rerun`): the run whose answers it reuses and the
    node from which it runs afresh; the reused rows are the run's reused.json."""

    model_config = ConfigDict(extra="allow", frozen=True)

    run: str
    node: str


class RunSpec(BaseModel):
    """The content of run.json."""

    model_config = ConfigDict(extra="allow", frozen=True)

    format: Literal["crw-flow-run/1"] = FORMAT
    id: str
    workflow: WorkflowRef
    backend: Backend
    pool: int
    repository: str | None = None
    """The root of the git checkout the run's calls work in (None: plain directories)."""
    head: str | None = None
    """The commit (hex) the run's calls start from: the workflow's head, resolved at start."""
    host: str | None = None
    owner: str | None = None
    env: RunEnv | None = None
    codex_bin: str | None = None
    """The codex binary of a private `codex` host (`--codex-bin`); None: the one
    openai-codex-cli-bin installs, else `codex` on PATH."""
    settings: dict[str, bool | int | float] | None = None
    """The run's timers and limits, every one, as the start read them from the
    workflow's `[settings]`: every process of the run uses them. None: a spec
    written before the record, whose run uses the defaults."""

    max_file_bytes: int | None = None
    """The largest file the run's processes read (workflow, role store, schemas), as
    the start had it from `$CRW_MAX_FILE_BYTES`; None: the default
    (`crw.settings.max_file_bytes`)."""

    inputs: dict[str, Any] | None = None
    """The run's inputs as the start filled them: a string, int or bool value, or
    for a file input `{path, digest}` (its copy is the run's `inputs/NAME`). None:
    a workflow without inputs, or a spec written before them."""

    journal_db: str | None = None
    """The PostgreSQL database that keeps the run's journal (`--db`, $CRW_DB); None:
    its journal.jsonl (`crw.journal.stores` reads this member)."""
    rerun: RerunOf | None = None
    """A rerun's source (None: a run started with `crw flow start`)."""
    multi_agent: Literal["multi_agent_v1", "multi_agent_v2"] | None = None
    """A session run's multi-agent protocol as its start chose it
    (`crw.engine.owner.multi_agent`); None: v1 (a spec written before the record).
    The journal's `started` rows keep it once the run ran."""

    def run_settings(self) -> Settings:
        """The settings the run's processes use: the recorded ones (a key this crw
        does not know is left out, one it knows and the spec lacks is its default)."""
        known = {field.name for field in fields(Settings)}
        recorded = {key: value for key, value in (self.settings or {}).items() if key in known}
        return Settings(**recorded)  # type: ignore[arg-type]

    def file_limit(self) -> contextlib.AbstractContextManager[None]:
        """Inside, files are read up to the limit the start recorded (`max_file_bytes`)."""
        return file_limit(self.max_file_bytes)

    def env_overrides(self) -> dict[str, str]:
        """The variables a launched or running process gets from the spec, one entry each.

        Empty for a spec written before the record: the environment stays the caller's.
        """
        if self.env is None:
            return {}
        return {"TMPDIR": self.env.TMPDIR}

    def to_json(self) -> dict[str, Any]:
        """The JSON object of run.json; `env` is left out when the spec has none."""
        data = self.model_dump(mode="json")
        for optional in (
            "env", "codex_bin", "settings", "inputs", "journal_db", "rerun", "max_file_bytes"
        ):  # fmt: skip
            if data.get(optional) is None:
                data.pop(optional, None)
        return data


@contextlib.contextmanager
def recorded_env(spec: RunSpec, environ: MutableMapping[str, str]) -> Iterator[None]:
    """The env `spec` records put into `environ` (the process's own) for the run, and
    what was there put back after, so everything the run reads from its environment,
    its temp files too, lies below the recorded TMPDIR. A process that reads its spec
    enters it before it takes a lock.

    Raises:
        InputError: the recorded TMPDIR is missing, not a directory or not writable
            (the reason names it); nothing was changed.
    """
    overrides = spec.env_overrides()
    problem = recorded_problem(overrides)
    if problem is not None:
        raise InputError(f"run {spec.id}: {problem}, then resume the run")
    before = {key: environ.get(key) for key in overrides}
    cached = tempfile.tempdir  # what gettempdir() answers is computed once, then kept
    environ.update(overrides)
    tempfile.tempdir = None
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        tempfile.tempdir = cached


def check_backend(run: RunState, spec: RunSpec) -> None:
    """Refuse a mixed resume (the spec's engine.StartedBackend): a resume goes on with
    the backend the run's started row records, and a run whose first process stored
    no started row with its spec's; a spec that names another is an input error.

    Raises:
        InputError: run.json names another backend than the started row.
    """
    if run.processes and run.backend != spec.backend:
        raise InputError(
            f"run {spec.id} started on the {run.backend} backend and its run.json names "
            f"{spec.backend}: a mixed resume; restore run.json's backend to {run.backend}"
        )


def recorded_settings(settings: Settings) -> dict[str, bool | int | float]:
    """`settings` as run.json records them: every key."""
    return asdict(settings)


def run_spec_bytes(spec: RunSpec) -> bytes:
    """run.json's bytes for `spec`, as `write_run_spec` writes them."""
    return (json.dumps(spec.to_json(), indent=2, ensure_ascii=False) + "\n").encode()


def write_run_spec(path: Path, spec: RunSpec) -> None:
    """Write `spec` to `path` atomically: a temporary file beside it, fsync, rename, fsync.

    Raises:
        RefusedError: the file cannot be written (the reason names it).
    """
    try:
        _write_atomically(path, run_spec_bytes(spec))
    except OSError as err:
        raise RefusedError(
            f"cannot write {path}: {err.strerror or err}; "
            "make its directory writable and start again"
        ) from err


def read_run_spec(path: Path) -> RunSpec:
    """Read and validate run.json.

    Raises:
        InputError: the file is missing, unreadable or not a crw-flow-run/1 spec.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{path} not found; name a run started with crw flow start (crw flow list lists them)"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read {path}: {err}; check the file's permissions") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{path} is not JSON (line {err.lineno}: {err.msg}); restore the run's run.json"
        ) from None
    if isinstance(data, dict) and data.get("format") != FORMAT:
        raise InputError(
            f"{path} has format {json.dumps(data.get('format'))}, not {FORMAT}; "
            "read it with the crw that wrote it"
        )
    try:
        return RunSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        raise InputError(
            f"{path} is not a {FORMAT} spec ({where}: {first['msg']}); restore the run's run.json"
        ) from None


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
