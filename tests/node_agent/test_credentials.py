from __future__ import annotations

import json
import os
import stat

import pytest

from node_agent import credentials
from node_agent.credentials import CredentialFileError, JoinCode, NodeCredential


def test_a_bare_line_is_a_join_code():
    assert credentials.parse("jc_abc123\n") == JoinCode("jc_abc123")


def test_json_is_the_stored_credential():
    cred = credentials.parse('{"nodeId": 7, "credential": "c", "probeKey": "p"}')
    assert cred == NodeCredential(node_id=7, credential="c", probe_key="p")
    assert "c" not in repr(cred).replace("credential", "")


@pytest.mark.parametrize("text", ["", "two words", "a\nb", '{"nodeId": "7"}', "{broken"])
def test_anything_else_is_refused(text):
    with pytest.raises(CredentialFileError):
        credentials.parse(text)


def test_it_is_replaced_atomically_with_mode_0600(tmp_path):
    path = tmp_path / "credential"
    path.write_text("jc_code\n")
    os.chmod(path, 0o644)
    credentials.write(path, NodeCredential(node_id=3, credential="secret", probe_key="probe"))
    assert json.loads(path.read_text()) == {"nodeId": 3, "credential": "secret", "probeKey": "probe"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["credential"], "no temporary file left behind"
