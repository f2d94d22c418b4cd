"""Files in and out: bounded reads of YAML, JSON and text with one-line errors, and writes that leave
the previous file whole when they fail (write aside, then rename), with the user's umask.

Every read is bounded before it starts (`ppb_core.limits`): a file over the size limit,
a FIFO or a device (`/dev/zero`) is refused unread; nesting deeper than the limit, YAML aliases
expanding past the limit, duplicate keys, JSON's NaN and Infinity are refused while parsing.
Errors name the file and, where there is one, the key path; they never echo the file's content.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ppb_core import limits
from ppb_core.errors import InputError, field_path, shown, shown_key

# ---------------------------------------------------------------------------------------------
# Reading


def read_bytes(path: str | Path, directory_problem: str = "is a directory, not a file", limit: int = 0) -> bytes:
    """A regular file's bytes, at most *limit* (default `limits.FILE_BYTES`); anything else is an InputError."""
    path = Path(path)
    limit = limit or limits.FILE_BYTES
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise InputError(path, None, directory_problem)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(path, None, "is not a regular file (a device, FIFO or socket)")
        if info.st_size > limit:
            raise InputError(path, None, limits.over(info.st_size, limit, "bytes"))
        chunks: list[bytes] = []
        total = 0
        with path.open("rb") as handle:
            while total <= limit and (chunk := handle.read(min(2**24, limit + 1 - total))):
                chunks.append(chunk)
                total += len(chunk)
        data = b"".join(chunks)
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    except NotADirectoryError:
        raise InputError(path, None, "file not found (a part of the path is a file, not a folder)") from None
    except OSError as err:
        raise InputError(path, None, f"cannot read: {err.strerror or type(err).__name__}") from None
    if len(data) > limit:  # grew while being read
        raise InputError(path, None, limits.over(len(data), limit, "bytes"))
    return data


def decode(data: bytes, source: str | Path) -> str:
    """UTF-8 text; other bytes are an InputError naming the first bad byte's offset, not the bytes."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(source, None, f"cannot read: not UTF-8 text ({err.reason} at byte {err.start})") from None


def read_text(path: str | Path, directory_problem: str = "is a directory, not a file", limit: int = 0) -> str:
    """A text file's content; a missing, unreadable, oversized or non-UTF-8 file is an InputError naming it."""
    return decode(read_bytes(path, directory_problem, limit), path)


class _NonFinite:
    """JSON's NaN, Infinity or -Infinity where it was read, refused with its key path after parsing."""

    def __init__(self, name: str) -> None:
        self.name = name


class _Duplicated(dict):
    """An object with a key written twice, refused with its key path after parsing."""

    duplicate: str = ""


def _json_int(text: str) -> int:
    if len(text) > 100:
        raise ValueError(f"a {len(text)}-digit integer")
    return int(text)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            marked = _Duplicated(result)
            marked.duplicate = key
            return marked
        result[key] = value
    return result


def parse_json(text: str, source: str | Path) -> Any:
    """Parsed JSON: duplicate keys, NaN and Infinity, integers of over 100 digits and nesting deeper
    than `limits.DEPTH` are InputErrors naming *source* and, but for syntax errors, the key path."""
    try:
        data = json.loads(text, object_pairs_hook=_json_object, parse_constant=_NonFinite, parse_int=_json_int)
    except json.JSONDecodeError as err:
        raise InputError(source, None, f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except RecursionError:
        raise InputError(source, None, f"nested more than ppb's limit of {limits.DEPTH} deep") from None
    except ValueError as err:
        raise InputError(source, None, f"not valid JSON: {err}") from None
    if isinstance(data, dict | list | _NonFinite):
        _check_parsed(data, source)
    return data


def _check_parsed(data: Any, source: str | Path) -> None:
    """Every value of parsed JSON, walked without recursion: nesting at most `limits.DEPTH`, no
    duplicate key, no NaN or Infinity; each refusal names the key path."""

    def path_of(link: tuple | None) -> str | None:
        parts: list[str | int] = []
        while link is not None:
            link, key = link
            parts.append(shown_key(key) if isinstance(key, str) else key)
        return field_path(parts[::-1])

    # (value, depth, link): a link is (the parent's link, this value's key), so paths cost nothing until asked for
    stack: list[tuple[Any, int, tuple | None]] = [(data, 0, None)]
    while stack:
        value, depth, link = stack.pop()
        if isinstance(value, _NonFinite):
            raise InputError(source, path_of(link), f"{value.name} is not a number JSON allows")
        if isinstance(value, _Duplicated):
            raise InputError(source, path_of((link, value.duplicate)), "key appears twice")
        if depth >= limits.DEPTH:
            raise InputError(source, path_of(link), f"nested more than ppb's limit of {limits.DEPTH} deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            if isinstance(child, dict | list | _NonFinite):
                stack.append((child, depth + 1, (link, key)))


def parse_toml(text: str, source: str | Path) -> dict[str, Any]:
    """A parsed TOML document (a torchtitan job): syntax errors, nesting deeper than `limits.DEPTH` (tomllib
    recursed into RecursionError) and integers of thousands of digits (Python's int conversion limit, a
    ValueError) are InputErrors naming *source*."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(source, None, f"not TOML: {err}") from None
    except RecursionError:
        raise InputError(source, None, f"nested more than ppb's limit of {limits.DEPTH} deep") from None
    except ValueError as err:
        what = "an integer of thousands of digits" if "digits" in str(err) else "a value that cannot be read"
        raise InputError(source, None, f"not TOML: {what}") from None
    _check_parsed(document, source)
    return document


def read_json(path: str | Path, directory_problem: str = "is a directory, not a JSON file") -> Any:
    """The parsed JSON of a file; a missing, unreadable, oversized or malformed file is an InputError naming it."""
    return parse_json(read_text(path, directory_problem), path)


class _BoundedComposer(yaml.composer.Composer):
    """PyYAML's composer, bounded: nesting, values with aliases expanded, duplicate keys and recursive
    aliases are refused as the nodes are composed, each naming its key path. Composing is
    linear in the file; the alias bomb (nine levels of nine aliases) stops at the limit."""

    def __init__(self) -> None:
        super().__init__()
        self.path: list[str] = []
        self.sizes: dict[int, int] = {}  # id(node) -> values under it, aliases expanded
        self.open: set[int] = set()  # collections being composed (an alias to one recurses)

    def refuse(self, problem: str) -> InputError:
        return InputError(self.source_name, field_path(list(self.path)), problem)

    def compose_document(self) -> Node:
        node = super().compose_document()
        self.sizes.clear()
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) in self.open:
                raise self.refuse(f"alias *{shown(event.anchor)[1:-1]} refers to a collection it is in")
            return super().compose_node(parent, index)
        if self.check_event(SequenceStartEvent, MappingStartEvent) and len(self.path) >= limits.DEPTH:
            raise self.refuse(f"nested more than ppb's limit of {limits.DEPTH} deep")
        return super().compose_node(parent, index)

    def _size(self, node: Node) -> int:
        return self.sizes.get(id(node), 1)

    def _add(self, total: int, node: Node) -> int:
        total += self._size(node)
        if total > limits.YAML_VALUES:
            raise self.refuse(
                f"more than ppb's limit of {limits.YAML_VALUES:,} values with its aliases expanded (ppb_core/limits.py)"
            )
        return total

    def compose_sequence_node(self, anchor: str | None) -> SequenceNode:
        start = self.get_event()
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(SequenceNode, None, start.implicit)
        node = SequenceNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        self.open.add(id(node))
        total = 1
        while not self.check_event(SequenceEndEvent):
            self.path.append(str(len(node.value)))
            child = self.compose_node(node, len(node.value))
            self.path.pop()
            node.value.append(child)
            total = self._add(total, child)
        node.end_mark = self.get_event().end_mark
        self.open.discard(id(node))
        self.sizes[id(node)] = total
        return node

    def compose_mapping_node(self, anchor: str | None) -> MappingNode:
        start = self.get_event()
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(MappingNode, None, start.implicit)
        node = MappingNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        self.open.add(id(node))
        total = 1
        seen: set[tuple[str, str]] = set()
        while not self.check_event(MappingEndEvent):
            key = self.compose_node(node, None)
            name = key.value if isinstance(key, ScalarNode) else "?"  # a collection as a key
            if isinstance(key, ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if (key.tag, key.value) in seen:
                    self.path.append(shown_key(name))
                    raise self.refuse(f"key appears twice (line {key.start_mark.line + 1})")
                seen.add((key.tag, key.value))
            self.path.append(shown_key(name))
            value = self.compose_node(node, key)
            self.path.pop()
            node.value.append((key, value))
            total = self._add(self._add(total, key), value)
        node.end_mark = self.get_event().end_mark
        self.open.discard(id(node))
        self.sizes[id(node)] = total
        return node


if yaml.__with_libyaml__:
    from yaml.cyaml import CParser as _Parser
else:  # PyYAML built without libyaml: its Python reader, scanner and parser, slower, same documents

    class _Parser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):  # type: ignore[no-redef]
        def __init__(self, text: str) -> None:
            yaml.reader.Reader.__init__(self, text)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)

        def dispose(self) -> None:
            pass


class _Loader(_Parser, _BoundedComposer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """libyaml's C scanner and parser (the slow part in Python) under the bounded composer."""

    # The Python composer's methods, not the C parser's own composer.
    compose_document = _BoundedComposer.compose_document
    compose_node = _BoundedComposer.compose_node
    get_single_node = _BoundedComposer.get_single_node
    check_node = _BoundedComposer.check_node
    get_node = _BoundedComposer.get_node

    def __init__(self, text: str, source: str) -> None:
        _Parser.__init__(self, text)
        _BoundedComposer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self.source_name = source


def parse_yaml(text: str, source: str | Path) -> Any:
    """One YAML document as plain data (YAML 1.1 as PyYAML's safe loader reads it), bounded: see
    `_BoundedComposer`. Any problem is an InputError naming *source*, never echoing the text."""
    loader = _Loader(text, str(source))
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = _yaml_problem(f"{err.context}: {err.problem}" if err.context else err.problem)
        raise InputError(source, None, f"not valid YAML{at}: {problem}") from None
    except yaml.YAMLError as err:
        raise InputError(source, None, f"not valid YAML: {_yaml_problem(str(err))}") from None
    except (ValueError, OverflowError) as err:  # an integer of thousands of digits, a date that does not exist
        what = "an integer of thousands of digits" if "digits" in str(err) else "a value that cannot be read"
        raise InputError(source, None, f"not valid YAML: {what}") from None
    except RecursionError:
        raise InputError(source, None, f"nested more than ppb's limit of {limits.DEPTH} deep") from None
    finally:
        loader.dispose()


def _yaml_problem(problem: str | None) -> str:
    """libyaml's description of a problem, bounded (it may quote the offending characters)."""
    text = " ".join((problem or "invalid").split())
    return text if len(text) <= 120 else text[:120] + "…"


# Another tool's files a person may hand to a command that reads a run config or a layers.json: each named by its
# suffix, with the `ppb import` that writes the run config from it (it read as "not valid YAML at line 2")
FOREIGN = {
    ".toml": ("a torchtitan job TOML", "torchtitan"),
    ".sh": ("a launch script", "megatron"),
    ".bash": ("a launch script", "megatron"),
}


def refuse_foreign(path: str | Path, what: str, importable: bool = True) -> None:
    """One line for a job TOML or a launch script given where *what* (a run config, ...) is read; *importable*:
    what is read is a run config, which `ppb import` writes from it."""
    found = FOREIGN.get(Path(path).suffix.lower())
    if found is not None:
        said, tool = found
        how = f"`ppb import {tool} {Path(path).name} --gpus N --device NAME -o run.yaml` writes the run config"
        raise InputError(path, None, f"{said}, not {what}" + (f": {how}" if importable else ""))


def read_yaml(path: str | Path, directory_problem: str = "is a directory, not a YAML file") -> Any:
    """The parsed YAML of a file, at most `limits.YAML_BYTES`; any problem is an InputError naming it."""
    return parse_yaml(read_text(path, directory_problem, limits.YAML_BYTES), path)


# ---------------------------------------------------------------------------------------------
# Writing

# A write in flight is `.<name>.<pid>@<host>.<random>.tmp` beside its target; a killed writer leaves
# it. The host, because a pid means something only there: runs in other containers or on other
# machines may write to the same shared folder, each counting its pids from 1.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)(?:@(?P<host>[A-Za-z0-9-]{1,32}))?\.[A-Za-z0-9_]{8}\.tmp$")
_umask_lock = threading.Lock()


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc/self/status)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def host_tag() -> str:
    """This machine's (or container's) name as a temporary file's name carries it: letters, digits, `-`."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32] or "localhost"


def _temporary_for(path: Path) -> tuple[int, str]:
    prefix = f".{path.name}.{os.getpid()}@{host_tag()}."
    fd, temporary = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~umask())  # mkstemp's 0600 would outlive the rename
    return fd, temporary


def _write_aside(path: Path, data: bytes) -> str:
    fd, temporary = _temporary_for(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


def _made_folders(path: Path) -> list[Path]:
    """The folders above *path* that do not exist yet, outermost first."""
    missing = []
    for parent in path.parents:
        if parent.exists():
            break
        missing.append(parent)
    return missing[::-1]


def write_files(files: Mapping[str | Path, bytes]) -> None:
    """Write every file or none: each is written aside first, then all are renamed into place.

    A failure before the renames removes what was written aside and the folders made for it,
    and is an InputError naming the file (disk full, permission); the renames themselves do not
    fail on a local file system once the files beside them are written.
    """
    made: list[Path] = []
    written: list[tuple[str, Path]] = []
    current: Path | None = None
    try:
        for target, data in files.items():
            current = Path(target)
            missing = _made_folders(current)
            current.parent.mkdir(parents=True, exist_ok=True)
            made.extend(missing)
            written.append((_write_aside(current, data), current))
        for temporary, target in written:
            current = target
            os.replace(temporary, target)
    except BaseException as err:
        for temporary, _ in written:
            Path(temporary).unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(err, OSError):
            raise InputError(current, None, f"cannot write: {err.strerror or type(err).__name__}") from None
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    write_files({path: data})


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def remove_stale_temporaries(root: str | Path, older_than_s: float = 3600.0) -> list[Path]:
    """Remove the temporary files killed writes left under *root* (`.<name>.<pid>@<host>.<random>.tmp`).

    A file is stale when it is older than *older_than_s*, or when it was written on this host
    by a process that is gone. Another host's file is judged by its age alone: its pid means
    nothing here. Returns what was removed; never raises for a file another process removed first.
    """
    removed: list[Path] = []
    now, here = time.time(), host_tag()
    for candidate in Path(root).rglob(".*.tmp"):
        match = _TEMPORARY.match(candidate.name)
        if match is None:
            continue
        try:
            age = now - candidate.lstat().st_mtime
        except OSError:
            continue
        ours = match["host"] in (None, here)  # without a host: written by a ppb that did not name it
        if age <= older_than_s and (not ours or _alive(int(match["pid"]))):
            continue
        with contextlib.suppress(FileNotFoundError):
            candidate.unlink()
            removed.append(candidate)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def check_output(path: str | Path, folder: bool = False, inputs: tuple[str | Path, ...] = ()) -> None:
    """That *path* can be written (a file, or with *folder* a folder of files), before any work starts.

    Refused: a file path that is a folder, a folder path that is a file, a path under a file, a
    place where this process cannot create files (probed with a file made and removed at once), and
    the command's own input file among *inputs* (`ppb balance run.yaml -o run.yaml` replaced the run
    config with the plan).
    """
    path = Path(path)
    kind = "folder" if folder else "file"
    for given in inputs:
        if os.path.isfile(path) and os.path.isfile(given) and os.path.samefile(path, given):
            raise InputError(path, None, f"is the input {given}: give another output {kind}")
    if path.exists() or path.is_symlink():
        if folder and not path.is_dir():
            raise InputError(path, None, "is a file, not an output folder")
        if not folder and path.is_dir():
            raise InputError(path, None, "is a folder: give an output file name")
    existing = path if folder and path.is_dir() else path.parent
    while not existing.exists():
        if existing.is_symlink():
            raise InputError(path, None, f"cannot write the {kind}: {existing} is a broken link")
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(path, None, f"cannot write the {kind}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".ppb-probe.", suffix=".tmp", dir=existing)
    except OSError as err:
        raise InputError(path, None, f"cannot write the {kind} in {existing}: {err.strerror or 'refused'}") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


@contextlib.contextmanager
def silenced(fd: int) -> Iterator[None]:
    """File descriptor 1 or 2 sent to /dev/null for a while: libraries that print there themselves
    (HiGHS's banner, the torch profiler's lines) must not spoil `--json` output or the terminal."""
    (sys.stdout if fd == 1 else sys.stderr).flush()
    try:
        saved = os.dup(fd)
    except OSError:  # no such descriptor (a closed stream): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
