"""The built wheel, installed away from the checkout: one `dsdoctor` package, its data, its API and its command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
LAYERS = ("api", "kb", "rules")
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "dsdoctor", *LAYERS)

CHECK = textwrap.dedent("""
    import importlib.util, json, sys
    from importlib.resources import files
    import dsdoctor
    from dsdoctor import diagnose
    found = {name: importlib.util.find_spec(name) is not None for name in ("api", "kb", "rules")}
    result = diagnose(sys.argv[1], history=False)
    data = {
        "templates": files("dsdoctor.api.web").joinpath("templates", "base.html").is_file(),
        "static": files("dsdoctor.api.web").joinpath("static", "web.css").is_file(),
        "migrations": sorted(p.name for p in files("dsdoctor.kb.storage.migrations").joinpath("postgresql").iterdir()
                             if p.name.endswith(".sql")),
        "seed": files("dsdoctor.kb").joinpath("data", "incidents", "seed.jsonl").is_file(),
    }
    print(json.dumps({"file": dsdoctor.__file__, "version": dsdoctor.__version__, "top_level": found,
                      "top_cause": result.top_cause["id"], "data": data}))
""")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from a copy of the sources (the checkout stays clean), installed with --target."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        (shutil.copytree(path, src / name, ignore=ignore) if path.is_dir() else shutil.copy2(path, src / name))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(base / "dist"), str(src)],
                   check=True, capture_output=True, text=True, timeout=300)
    wheel = next((base / "dist").glob("dsdoctor-*.whl"))
    target = base / "target"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True,
                   capture_output=True, text=True, timeout=300)
    return target


def _env(target: Path, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DSDOCTOR_KB_PATH", "PYTHONSAFEPATH")}
    # one user cache for the tests of this module: the rules are compiled once (~20 s), not per test
    return {**env, "PYTHONPATH": str(target), "DSDOCTOR_HOME": str(tmp_path / "home"),
            "XDG_CACHE_HOME": str(target.parent / "cache")}


def test_the_wheel_holds_one_top_level_package_with_every_file_of_the_layers(installed):
    top = {p.name for p in installed.iterdir() if not p.name.endswith((".dist-info", ".data")) and p.name != "bin"}
    assert top == {"dsdoctor"}
    tracked = subprocess.run(["git", "ls-files", "dsdoctor", *LAYERS], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0 or not tracked.stdout:
        pytest.skip("not a git checkout: cannot list the tracked files")
    want = {f if f.startswith("dsdoctor/") else f"dsdoctor/{f}" for f in tracked.stdout.split()}
    got = {p.relative_to(installed).as_posix() for p in (installed / "dsdoctor").rglob("*")
           if p.is_file() and "__pycache__" not in p.parts}
    assert want - got == set(), "tracked files missing from the wheel (add them to package-data)"


def test_imported_from_outside_the_checkout(installed, tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    done = subprocess.run([sys.executable, "-c", CHECK, str(ROOT / "examples" / "evidence.json")], cwd=cwd,
                          env=_env(installed, tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(installed)
    assert out["top_level"] == {"api": False, "kb": False, "rules": False}
    assert out["top_cause"] == "config.version_mismatch"
    assert out["data"]["templates"] and out["data"]["static"] and out["data"]["seed"]
    assert out["data"]["migrations"] and out["version"] != "0+unknown"


def test_the_console_script_works(installed, tmp_path):
    env = _env(installed, tmp_path)
    version = subprocess.run([str(installed / "bin" / "dsdoctor"), "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("dsdoctor "), version.stderr
    run = subprocess.run([str(installed / "bin" / "dsdoctor"), "diagnose", "--evidence",
                          str(ROOT / "examples" / "evidence.json"), "--format", "json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["causes"][0]["id"] == "config.version_mismatch"


def test_the_editable_install_maps_the_same_names(tmp_path):
    """`make test`'s `pip install -e .`: from any folder, dsdoctor.kb is the clone's kb/ and `kb` is no module."""
    code = ("import importlib.util, json, dsdoctor.kb.loader as loader, dsdoctor.api.web as web\n"
            "print(json.dumps([loader.__file__, web.__file__, "
            "[importlib.util.find_spec(n) is None for n in ('api', 'kb', 'rules')]]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    loader_file, web_file, absent = json.loads(done.stdout)
    assert Path(loader_file) == ROOT / "kb" / "loader.py" and Path(web_file) == ROOT / "api" / "web" / "__init__.py"
    assert absent == [True, True, True]
