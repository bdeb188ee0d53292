"""A node's schema with every `$ref` it makes checked, and the files it names bundled.

A schema may refer within itself (`#/$defs/item`, `#anchor`, a subschema's `$id`)
or to a JSON file beside the workflow (`defs.json#/$defs/item`), resolved against
the document that holds the ref and kept inside the workflow's directory. Any
other ref is refused when the workflow is loaded: a URL of any scheme (the run
would fetch it: a request from the orchestrator to wherever a workflow points,
and a crash loop when it cannot), an absolute path, a path out of the directory.

The files a schema names are read once, at load, and embedded in the schema as
a compound document (JSON Schema 2020-12, "Bundling"): each under `$defs` with
its file URI as `$id`, the schema's own `$id` set to its file's URI. The packet
then shows the agent the whole contract, and checking an answer reads nothing:
the registry validation uses refuses to retrieve (`refusing_registry`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

from pydantic_core import PydanticCustomError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from crw.engine.config._tomlsource import UnreadableFile, crw_error, read_regular_file

_REF_KEYS = ("$ref", "$dynamicRef")
_FIX = "refer within the schema (#/...) or to a JSON file in the workflow's directory"
BUNDLED = "crw:"
"""The prefix of the `$defs` keys the bundled files take."""


def _refuse_retrieval(uri: str) -> Any:
    raise LookupError(f"{uri} is not part of the schema; crw retrieves nothing")


def refusing_registry() -> Registry[Any]:
    """A registry that retrieves nothing: a ref outside the schema is unresolvable."""
    return Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _walk(contents: object, base: str) -> Iterator[tuple[str, str, str]]:
    """Each `(base URI, keyword, ref)` anywhere in a schema, and each `$id` as
    `(base URI, "$id", id)`. Every object is looked into, not only the places a
    subschema goes: a ref in `definitions` (draft 7) or under a keyword crw does
    not know is still reached through a JSON pointer."""
    if isinstance(contents, list):
        for item in contents:
            yield from _walk(item, base)
        return
    if not isinstance(contents, Mapping):
        return
    own_id = contents.get("$id")
    if isinstance(own_id, str):
        base = urljoin(base, own_id)
        yield base, "$id", own_id
    for key in _REF_KEYS:
        ref = contents.get(key)
        if isinstance(ref, str):
            yield base, key, ref
    for value in contents.values():
        yield from _walk(value, base)


def _label(document: Path, directory: Path) -> str:
    """How a message names `document`: relative to the workflow's directory."""
    return (
        str(document.relative_to(directory))
        if document.is_relative_to(directory)
        else str(document)
    )


class _Bundle:
    """The files a schema refers to, read under `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.root = directory.resolve()
        self.files: dict[str, dict[str, Any]] = {}
        self.ids: set[str] = set()

    def add(self, contents: Mapping[str, Any], base: str, document: str) -> None:
        """Check each ref of `contents` (whose base URI is `base`, read from the file
        named `document`) and read the files it names, transitively."""
        found = list(_walk(contents, base))
        self.ids.add(urldefrag(base)[0])
        self.ids.update(urldefrag(at)[0] for at, key, _ in found if key == "$id")
        for at, key, ref in found:
            if key != "$id":
                self._follow(at, key, ref, document)

    def _follow(self, base: str, key: str, ref: str, document: str) -> None:
        parts = urlsplit(ref)
        where = f"{key} {json.dumps(ref)} in {document}"
        if parts.scheme or parts.netloc:
            raise crw_error(f"schema {where} is a URL, which crw never fetches", _FIX)
        if parts.path.startswith("/"):
            raise crw_error(f"schema {where} is an absolute path", _FIX)
        target = urldefrag(urljoin(base, ref))[0]
        if not parts.path or target in self.ids or target in self.files:
            return
        if urlsplit(target).scheme != "file":
            raise crw_error(
                f"schema {where} resolves to {target} against the schema's $id, "
                "which crw never fetches",
                _FIX,
            )
        # urllib.request (with http.client and email) only for a schema that names a
        # file: most runs' schemas name none, and their process starts without it.
        from urllib.request import url2pathname

        path = Path(url2pathname(urlsplit(target).path))
        if not path.resolve().is_relative_to(self.root):
            raise crw_error(f"schema {where} is outside the workflow's directory", _FIX)
        contents = read_schema_file(path, ref, relative_to=document)
        self.files[target] = {**contents, "$id": target}
        self.add(self.files[target], target, _label(path, self.directory))


def read_schema_file(
    path: Path, name: str, relative_to: str = "the workflow file"
) -> dict[str, Any]:
    """The JSON object of the schema file at `path`, named `name` in `relative_to`.

    Raises:
        PydanticCustomError: missing, not a regular file, too large, not JSON, or
            not an object.
    """
    try:
        data = read_regular_file(path, f"schema file {json.dumps(name)}")
    except FileNotFoundError:
        raise crw_error(
            f"schema file {json.dumps(name)} does not exist (looked at {path})",
            f"fix the path; it is relative to {relative_to}",
        ) from None
    except UnreadableFile as err:
        raise crw_error(err.what, err.fix) from None
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise crw_error(
            f"schema file {json.dumps(name)} is not UTF-8", "save it as UTF-8"
        ) from None
    except json.JSONDecodeError as err:
        raise crw_error(
            f"schema file {json.dumps(name)} is not JSON ({err.msg} at line {err.lineno})",
            "fix the JSON",
        ) from None
    if not isinstance(value, dict):
        raise crw_error(
            f"schema file {json.dumps(name)} holds no JSON object", "write a JSON Schema object"
        )
    return value


def bundle(schema: dict[str, Any], document: Path | None, directory: Path | None) -> dict[str, Any]:
    """`schema`, read from `document` (the workflow file for an inline schema), with
    its refs checked and the files they name under `directory` embedded. With no
    document (a schema made outside a workflow file) it may refer only within itself.

    Returns:
        `schema` itself when it names no file; else the compound document.

    Raises:
        PydanticCustomError: a ref that is a URL, an absolute path, a path out of
            `directory`, a file that cannot be read, or a ref that resolves to
            nothing.
    """
    own_id = schema.get("$id")
    if document is None or directory is None:
        _check_resolves(schema)
        return schema
    base = urljoin(document.as_uri(), own_id if isinstance(own_id, str) else "")
    files = _Bundle(directory)
    files.add(schema, base, _label(document, directory))
    if not files.files:
        _check_resolves(schema)
        return schema
    defs = dict(schema.get("$defs") or {})
    defs.update({BUNDLED + uri: contents for uri, contents in files.files.items()})
    bundled = {**schema, "$id": base, "$defs": defs}
    _check_resolves(bundled)
    return bundled


def _check_resolves(schema: dict[str, Any]) -> None:
    """Every ref of `schema` finds its target in the schema alone."""
    own_id = schema.get("$id")
    resolver = refusing_registry().resolver_with_root(DRAFT202012.create_resource(schema))
    for base, key, ref in _walk(schema, own_id if isinstance(own_id, str) else ""):
        if key == "$id":
            continue
        try:
            resolver.lookup(urljoin(base, ref))
        except Unresolvable:
            raise _unresolved(key, ref) from None


def _unresolved(key: str, ref: str) -> PydanticCustomError:
    return crw_error(
        f"schema {key} {json.dumps(ref)} points to nothing", "fix the ref or add what it names"
    )
