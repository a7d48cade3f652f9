"""napkin analyze's results and napkin kernel's files on disk (analyzer.common.cache): a repeated command
reads its answer, any change to what the answer depends on computes it again, and the cache never
changes an answer."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analyzer.codegen as codegen
import analyzer.model.analysis as analysis
from analyzer.cli import app
from analyzer.common import cache, resources

runner = CliRunner()


def _counting(monkeypatch, tmp_path, owner, name: str) -> list[str]:
    """The cache on, in a folder of this test's; the list of diagrams `owner.name` computed for (what
    the cache did not answer)."""
    monkeypatch.setenv("NAPKIN_CACHE", "on")
    monkeypatch.setenv("NAPKIN_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[str] = []
    real = getattr(owner, name)

    def counted(diagram, *args, **kwargs):
        calls.append(str(diagram))
        return real(diagram, *args, **kwargs)
    monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.fixture
def computed(monkeypatch, tmp_path):
    """The analyses computed (not read)."""
    return _counting(monkeypatch, tmp_path, analysis, "analyze")


@pytest.fixture
def generated(monkeypatch, tmp_path):
    """The kernel files generated (not read)."""
    return _counting(monkeypatch, tmp_path, codegen, "generate")


def analyze(*args: str) -> str:
    result = runner.invoke(app, ["analyze", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_repeated_command_reads_its_answer(computed, tmp_path):
    first = analyze("attention", "--gpu", "h100", "--json")
    assert analyze("attention", "--gpu", "h100", "--json") == first and len(computed) == 1
    assert analyze("attention", "--gpu", "h100") and len(computed) == 1      # the table from the same entry
    analyze("attention", "--gpu", "h100", "--set", "q=4096")                  # other options: computed
    analyze("attention", "--gpu", "h200")                                     # another GPU: computed
    assert len(computed) == 3 and len(list((tmp_path / "cache" / "analyze").glob("*.json"))) == 3


def test_an_edited_diagram_is_computed_again(computed, tmp_path):
    path = tmp_path / "mine.yaml"
    shutil.copy(resources.shipped("diagrams")["attention"], path)
    first = analyze(str(path), "--gpu", "h100", "--json")
    path.write_text(path.read_text().replace("16384", "8192"))
    second = analyze(str(path), "--gpu", "h100", "--json")
    assert len(computed) == 2 and first != second


def test_a_damaged_entry_is_a_miss(computed, tmp_path):
    first = analyze("matmul", "--gpu", "a100", "--json")
    (entry,) = (tmp_path / "cache" / "analyze").glob("*.json")
    entry.write_text(entry.read_text()[:100])
    assert analyze("matmul", "--gpu", "a100", "--json") == first and len(computed) == 2


def test_a_profile_of_the_users_is_not_cached(computed, tmp_path):
    path = tmp_path / "gpu.yaml"
    shutil.copy(resources.shipped("hardware")["a100"], path)
    analyze("matmul", "--gpu", str(path))
    analyze("matmul", "--gpu", str(path))
    assert len(computed) == 2 and not (tmp_path / "cache").exists()


def test_off_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("NAPKIN_CACHE", "off")
    monkeypatch.setenv("NAPKIN_CACHE_DIR", str(tmp_path / "cache"))
    analyze("matmul", "--gpu", "a100")
    assert not Path(tmp_path / "cache").exists()


@pytest.mark.parametrize("command", [["analyze", "attention", "--gpu", "h100"],
                                     ["kernel", "attention", "--gpu", "h100", "-o", "kernel.py"]],
                         ids=["analyze", "kernel"])
def test_a_repeated_command_imports_no_model(tmp_path, command):
    """The point of the cache is speed: a repeated napkin analyze or napkin kernel reads its answer and
    shows or writes it without importing sympy or networkx (a stray import in the alias lookup or the
    report made analyze 3x slower)."""
    env = {**os.environ, "NAPKIN_CACHE": "on", "NAPKIN_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-X", "importtime", "-m", "analyzer",
            *[str(tmp_path / word) if word == "kernel.py" else word for word in command]]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    second = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines() if "|" in line}
    assert second.stdout == first.stdout
    assert "sympy" in {line.rsplit("|", 1)[-1].strip() for line in first.stderr.splitlines() if "|" in line}
    assert not {"sympy", "networkx", "matplotlib"} & imported


def kernel(*args: str) -> str:
    result = runner.invoke(app, ["kernel", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_repeated_kernel_writes_the_files_it_generated(generated, tmp_path):
    """napkin kernel ranks configurations by size, most of its time: a repeated one writes the same
    files from the cache, wherever -o points; other options, or a GPU file of the user's, generate."""
    kernel("matmul", "--gpu", "a100", "--backend", "cuda", "-o", str(tmp_path / "one.cu"))
    kernel("matmul", "--gpu", "a100", "--backend", "cuda", "-o", str(tmp_path / "two.cu"))
    assert len(generated) == 1
    for suffix in (".cu", ".py"):
        assert (tmp_path / f"one{suffix}").read_text() == (tmp_path / f"two{suffix}").read_text()
    kernel("matmul", "--gpu", "a100", "--backend", "triton", "-o", str(tmp_path / "three.py"))
    kernel("matmul", "--gpu", "a100", "--set", "a=512", "-o", str(tmp_path / "four.py"))
    assert len(generated) == 3
    profile = tmp_path / "gpu.yaml"
    shutil.copy(resources.shipped("hardware")["a100"], profile)
    kernel("matmul", "--gpu", str(profile), "-o", str(tmp_path / "five.py"))
    kernel("matmul", "--gpu", str(profile), "-o", str(tmp_path / "six.py"))
    assert len(generated) == 5 and len(list((tmp_path / "cache" / "kernel").glob("*.json"))) == 3


def test_a_damaged_kernel_entry_is_generated_again(generated, tmp_path):
    kernel("matmul", "--gpu", "a100", "-o", str(tmp_path / "one.py"))
    (entry,) = (tmp_path / "cache" / "kernel").glob("*.json")
    for damage in (entry.read_text()[:100], '{"source": 1}', "[]"):
        entry.write_text(damage)
        kernel("matmul", "--gpu", "a100", "-o", str(tmp_path / "two.py"))
        assert (tmp_path / "one.py").read_text() == (tmp_path / "two.py").read_text()
    assert len(generated) == 4


# -- the path as given, and an entry that is not what was stored --------------------------------------

def _regenerate_line(path: Path) -> str:
    lines = path.read_text().splitlines()
    return lines[lines.index("# Generated by napkin 0.1.0: do not edit; regenerate with") + 1]


def test_a_diagram_named_another_way_is_shown_as_named(generated, tmp_path, monkeypatch):
    """regression: the cache keyed a diagram by the file it names and served the first spelling's answer
    to another (the `regenerate with` line named a path the user had not given)."""
    (tmp_path / "sub").mkdir()
    shutil.copy(resources.shipped("diagrams")["matmul"], tmp_path / "sub" / "mm.yaml")
    monkeypatch.chdir(tmp_path)
    for spelling, out in (("sub/mm.yaml", "one.py"), (str(tmp_path / "sub" / "mm.yaml"), "two.py"),
                          ("sub/mm.yaml", "three.py")):
        kernel(spelling, "--gpu", "a100", "--backend", "triton", "-o", out)
        assert _regenerate_line(tmp_path / out) == f"#   napkin kernel {spelling} --gpu a100 --backend triton " \
                                                   "--dtype fp16"
    assert len(generated) == 2                                      # the repeated spelling is a hit


@pytest.fixture
def stored(monkeypatch, tmp_path):
    """The cache on in this test's folder, with one entry stored: (its name, its file)."""
    monkeypatch.setenv("NAPKIN_CACHE", "on")
    monkeypatch.setenv("NAPKIN_CACHE_DIR", str(tmp_path / "cache"))
    name = "0123456789abcdef0123456789abcdef"
    cache.store("analyze", name, '{"answer": 1}')
    assert cache.load("analyze", name) == '{"answer": 1}'
    return name, tmp_path / "cache" / "analyze" / f"{name}.json"


def test_an_entry_of_another_key_or_kind_is_a_miss(stored):
    """regression: an entry was served without checking that it was the one stored under its name (a
    copied or renamed file answered one command with another's answer)."""
    name, entry = stored
    cache.store("analyze", "f" * 32, '{"answer": 2}')
    assert entry.read_text().startswith(f"napkin-cache 1 analyze {name} ")      # the entry names its key
    shutil.copy(entry.with_name("f" * 32 + ".json"), entry)
    assert cache.load("analyze", name) is None
    cache.store("kernel", name, '{"answer": 1}')
    shutil.copy(entry.parent.parent / "kernel" / entry.name, entry)
    assert cache.load("analyze", name) is None


def test_an_entry_over_the_size_cap_is_a_miss(stored, monkeypatch):
    name, entry = stored
    monkeypatch.setattr(cache, "MAX_BYTES", entry.stat().st_size - 1)
    assert cache.load("analyze", name) is None
    cache.store("analyze", name, '{"answer": 1}')                      # nor is one so large written
    assert cache.load("analyze", name) is None


def test_a_changed_payload_is_a_miss_and_written_again(computed, tmp_path):
    """regression: a payload edited into other valid JSON was served as the answer."""
    first = analyze("matmul", "--gpu", "a100", "--json")
    (entry,) = (tmp_path / "cache" / "analyze").glob("*.json")
    text = entry.read_text()
    assert text.startswith("napkin-cache 1 analyze " + entry.stem + " ")      # the entry names its key
    entry.write_text(text.replace('"matmul"', '"attention"'))
    assert analyze("matmul", "--gpu", "a100", "--json") == first and len(computed) == 2
    assert entry.read_text() == text                                           # written again whole
    assert analyze("matmul", "--gpu", "a100", "--json") == first and len(computed) == 2


def _load_elsewhere(tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    """cache.load("analyze", name) in a process of its own, its memory capped at 2 GiB and its time at
    a minute: a cache that reads a FIFO or /dev/zero fails here instead of hanging the tests."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
    env = {**os.environ, "NAPKIN_CACHE": "on", "NAPKIN_CACHE_DIR": str(tmp_path / "cache")}
    code = f"from analyzer.common import cache; print(repr(cache.load('analyze', {name!r})))"
    try:
        return subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True,
                              timeout=60, preexec_fn=cap, cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired:
        pytest.fail("cache.load hung on its entry")


@pytest.mark.parametrize("make", [
    lambda entry, tmp: os.mkfifo(entry),
    lambda entry, tmp: entry.symlink_to("/dev/zero"),
    lambda entry, tmp: entry.symlink_to(tmp / "stored.json"),           # a whole entry, through a link
    lambda entry, tmp: entry.mkdir(),
], ids=["fifo", "link-to-dev-zero", "link-to-an-entry", "folder"])
def test_the_cache_reads_regular_files_only(stored, tmp_path, make):
    """regression: a FIFO in the cache folder hung napkin, a link to /dev/zero filled its memory."""
    name, entry = stored
    assert _load_elsewhere(tmp_path, name).stdout == repr('{"answer": 1}') + "\n"
    entry.rename(tmp_path / "stored.json")
    make(entry, tmp_path)
    read = _load_elsewhere(tmp_path, name)
    assert read.returncode == 0 and read.stdout == "None\n", read.stderr
    cache.store("analyze", name, '{"answer": 1}')                     # a miss computes and stores again
    if not entry.is_dir():                                           # (a folder is not written over)
        assert entry.is_file() and not entry.is_symlink()
        assert entry.read_text() == (tmp_path / "stored.json").read_text()


@pytest.mark.parametrize("fail", ["no-home", "full-disk", "folder-is-a-file"])
def test_a_cache_that_cannot_be_written_never_fails_the_command(computed, tmp_path, monkeypatch, fail):
    """regression: a cache folder napkin could not name (no $HOME, no home in the user database) ended
    napkin analyze in a traceback."""
    if fail == "no-home":
        for name in ("NAPKIN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"):
            monkeypatch.delenv(name, raising=False)

        def home() -> Path:
            raise RuntimeError("Could not determine home directory.")
        monkeypatch.setattr(Path, "home", staticmethod(home))
    elif fail == "full-disk":
        def full(*args, **kwargs):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(cache.tempfile, "mkstemp", full)
    else:
        (tmp_path / "cache").write_text("a file, not a folder\n")
    assert json.loads(analyze("matmul", "--gpu", "a100", "--json"))["diagram"]["name"] == "matmul"
