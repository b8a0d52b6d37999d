"""The on-disk snapshot of loaded knowledge (kb/snapshot.py) and what a small diagnosis imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsdoctor.kb import snapshot
from dsdoctor.kb.loader import load_kb

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cache_dir(tmp_path: Path):
    snapshot.configure(tmp_path / "cache")
    yield tmp_path / "cache"
    snapshot.configure(None)


def _counting(value):
    calls = []

    def build():
        calls.append(1)
        return dict(value)

    return build, calls


def test_a_snapshot_is_reused_while_the_files_are_unchanged_and_rebuilt_when_one_changes(tmp_path, cache_dir):
    data = tmp_path / "a.yaml"
    data.write_text("x: 1\n")
    build, calls = _counting({"x": 1})
    assert snapshot.cached("t", lambda: [data], ("dsdoctor.kb.snapshot",), build) == {"x": 1}
    assert snapshot.cached("t", lambda: [data], ("dsdoctor.kb.snapshot",), build) == {"x": 1}
    assert len(calls) == 1
    data.write_text("x: 2\n")  # same size, other bytes: the key is the content, not the mtime
    snapshot.cached("t", lambda: [data], ("dsdoctor.kb.snapshot",), build)
    assert len(calls) == 2
    snapshot.cached("t", lambda: [data], ("dsdoctor.kb.snapshot",), build, lambda: "other salt")
    assert len(calls) == 3


def test_a_damaged_snapshot_is_rebuilt_and_a_failed_build_stores_nothing(tmp_path, cache_dir):
    data = tmp_path / "a.yaml"
    data.write_text("x: 1\n")
    build, calls = _counting({"x": 1})
    snapshot.cached("t", lambda: [data], (), build)
    for entry in cache_dir.glob("t-*.pickle"):
        entry.write_bytes(b"not a pickle")
    assert snapshot.cached("t", lambda: [data], (), build) == {"x": 1} and len(calls) == 2

    def broken():
        raise ValueError("bad knowledge")

    with pytest.raises(ValueError):
        snapshot.cached("u", lambda: [data], (), broken)
    assert not list(cache_dir.glob("u-*"))


def test_off_by_default_and_a_missing_input_builds(tmp_path):
    build, calls = _counting({})
    snapshot.cached("t", lambda: [tmp_path / "missing.yaml"], (), build)
    snapshot.cached("t", lambda: [tmp_path / "missing.yaml"], (), build)
    assert len(calls) == 2


def test_the_knowledge_base_pickles_without_its_graph_and_rebuilds_it_on_use():
    import pickle

    kb = load_kb([])
    kb.cache["memo"] = object()
    restored = pickle.loads(pickle.dumps(kb))
    assert "graph" not in restored.__dict__ and restored.cache == {}
    assert sorted(restored.graph.edges) == sorted(kb.graph.edges)
    assert restored.likelihoods == kb.likelihoods


def test_a_small_diagnosis_from_snapshots_imports_neither_networkx_nor_marshmallow_nor_yaml_nor_the_store(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    script = ("import sys, json\nfrom api.cli import main\nrc = main(['diagnose', sys.argv[1], '--format', 'json'])\n"
              "print(json.dumps({'rc': rc, 'heavy': sorted(m for m in ('networkx', 'marshmallow', 'whoosh', 'yaml', "
              "'importlib.metadata', 'dsdoctor.kb.incidents.store', 'flask') if m in sys.modules)}))")
    env = dict(os.environ, DSDOCTOR_HOME=str(tmp_path / "home"), DSDOCTOR_KB_PATH="",
               XDG_CACHE_HOME=str(tmp_path / "cache"))  # the command line's caches go to the user cache
    runs = [subprocess.run([sys.executable, "-c", script, str(log)], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first["rc"] == second["rc"] == 0, runs[0].stderr
    assert {"marshmallow", "yaml"} <= set(first["heavy"])  # the first run parses and validates the files
    assert second["heavy"] == []
    assert {p.name.split("-")[0] for p in (tmp_path / "cache" / "dsdoctor").glob("*.pickle")} == \
        {"data", "engine", "kb", "rules", "settings"}
    assert not (tmp_path / "home").exists()  # and leaves the server's data directory alone


def test_the_command_line_looks_for_the_store_under_the_stores_own_file_name():
    import inspect

    from dsdoctor.api import cli_diagnose
    from dsdoctor.kb.incidents.store import DB_FILE

    assert f'"{DB_FILE}"' in inspect.getsource(cli_diagnose.site_history)
