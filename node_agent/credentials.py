"""The credential file: a join code at first start, the node's credential afterwards.

At first start the file holds the join code alone on one line. After ``POST join`` it is
replaced, atomically, by ``{"nodeId", "credential", "probeKey"}`` as JSON with mode 0600:
a crash at any moment leaves either the old join code or the complete new file, never half
of one. An operator who rotates the node writes a new bare join code into the file; the
agent then joins again.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


class CredentialFileError(Exception):
    pass


@dataclass(frozen=True)
class JoinCode:
    code: str


@dataclass(frozen=True)
class NodeCredential:
    node_id: int
    credential: str
    probe_key: str

    def __repr__(self) -> str:  # never print secrets by accident
        return f"NodeCredential(node_id={self.node_id}, credential=***, probe_key=***)"


def parse(text: str) -> JoinCode | NodeCredential:
    stripped = text.strip()
    if not stripped:
        raise CredentialFileError("the credential file is empty; put the node's join code in it")
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
            node_id, credential, probe_key = data["nodeId"], data["credential"], data["probeKey"]
        except (ValueError, KeyError, TypeError):
            raise CredentialFileError("the credential file holds broken JSON; put a fresh join code in it") from None
        if not isinstance(node_id, int) or not isinstance(credential, str) or not isinstance(probe_key, str):
            raise CredentialFileError("the credential file has fields of the wrong type; put a fresh join code in it")
        return NodeCredential(node_id=node_id, credential=credential, probe_key=probe_key)
    if len(stripped.splitlines()) != 1 or any(ch.isspace() for ch in stripped):
        raise CredentialFileError("the credential file must hold the join code alone on one line")
    return JoinCode(code=stripped)


def read(path: Path) -> JoinCode | NodeCredential:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialFileError(f"cannot read the credential file: {exc}") from None
    return parse(text)


def write(path: Path, cred: NodeCredential) -> None:
    """Replace the file atomically: temp file in the same folder, fsync, rename, fsync dir."""
    body = json.dumps({"nodeId": cred.node_id, "credential": cred.credential, "probeKey": cred.probe_key})
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(body + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
