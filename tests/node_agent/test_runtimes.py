from __future__ import annotations

import json

import pytest

from node_agent.runtimes import SpecError, builtin_specs, load_specs


def test_every_pool_has_its_r1_spec():
    specs = builtin_specs()
    assert {s: specs[s].pool for s in specs} == {f"{p}-r1": p for p in ("cpp", "java", "python", "mysql", "arkts")}
    assert specs["cpp-r1"].compile[:3] == ("g++", "-std=c++17", "-O2")
    assert specs["java-r1"].render(specs["java-r1"].run, memory_mb=256)[1] == "-Xmx256m"
    assert specs["arkts-r1"].stand_in and specs["arkts-r1"].compile[:2] == ("tsc", "--strict")


def test_an_operator_points_arkts_at_the_real_ark_compiler(tmp_path):
    spec_file = tmp_path / "specs.json"
    spec_file.write_text(json.dumps({
        "arkts-r1": {"compile": ["es2abc", "--output", "main.abc", "main.ets"], "run": ["ark_js_vm", "main.abc"],
                     "sourceFile": "main.ets", "files": {}, "binds": ["/opt/arkcompiler"], "standIn": "",
                     "check": [["es2abc", "--version"]]},
        "arkts-r2": {"base": "arkts-r1", "timeFactor": 1.5},
    }))
    specs = load_specs(spec_file)
    ark = specs["arkts-r1"]
    assert ark.compile == ("es2abc", "--output", "main.abc", "main.ets") and ark.run == ("ark_js_vm", "main.abc")
    assert ark.files == () and ark.binds == ("/opt/arkcompiler",) and not ark.stand_in
    assert specs["arkts-r2"].source_file == "main.ets" and specs["arkts-r2"].effective_time_ms(1000) == 1500


@pytest.mark.parametrize("content", ['[]', '{"x-r1": {"run": ["a"]}}', '{"cpp-r1": {"bogus": 1}}',
                                     '{"cpp-r1": {"memoryModel": "huge"}}', '{"cpp-r1": {"files": {"../x": ""}}}'])
def test_bad_spec_files_are_refused(tmp_path, content):
    spec_file = tmp_path / "specs.json"
    spec_file.write_text(content)
    with pytest.raises(SpecError):
        load_specs(spec_file)
