"""Every command that writes (`kernel`, `calibrate`, the plots, `draw`): a path it cannot write is one
error line naming the option, exit code 1, and nothing partial is left behind (analyzer.common.atomic).

The commands run in process (analyzer.cli.main), in an empty temporary folder; a full disk is simulated
by making the flush of a temporary file fail with ENOSPC, an unwritable folder by chmod where the tests
do not run as root, and by a refused temporary file otherwise.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.codegen.files import kernel_paths, write_kernel
from analyzer.common import atomic
from analyzer.common.errors import NapkinError

ROOT = Path(__file__).resolve().parents[2]
RECORDING = str(ROOT / "bench" / "results" / "sweep_h200.json")
LONG = "a" * 300


def napkin(monkeypatch, capsys, cwd: Path, *args: str) -> tuple[int, str, str]:
    """Run `napkin ARGS` in process in `cwd`: exit code, stdout, stderr."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["napkin", *args])
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def one_error(code: int, err: str, *fragments: str, exit_code: int = 1) -> str:
    assert code == exit_code, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def files_in(folder: Path) -> list[str]:
    """Every file under `folder`, temporary ones included (they start with a dot)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


# -- each writing command, each bad path -------------------------------------------------------------

WRITERS = {
    "kernel": ("kernel", "matmul", "-o", "{}.py"),
    "kernel-cuda": ("kernel", "matmul", "--backend", "cuda", "-o", "{}.cu"),
    "plot-roofline": ("plot", "roofline", "matmul", "-o", "{}.png"),
    "plot-transfers": ("plot", "transfers", "matmul", "-o", "{}.svg"),
    "plot-schedule": ("plot", "schedule", "attention", "-o", "{}.pdf"),
    "draw": ("draw", "matmul", "-o", "{}.png"),
    "calibrate": ("calibrate", RECORDING, "-o", "{}.yaml"),
    "calibrate-report": ("calibrate", RECORDING, "--report", "{}.md"),
    "calibrate-plot": ("calibrate", RECORDING, "--plot", "{}.png"),
    "calibrate-hopper": ("calibrate", str(ROOT / "bench" / "results" / "hopper_sweep_h100.json"), "--gpu", "h100",
                         "--kernel", "hopper", "--report", "{}.md"),
    "report": ("report", "matmul", "-o", "{}.html"),
    "analyze-plot": ("analyze", "matmul", "--set", "a=1024..2048", "--plot", "{}.png"),
}


def writer(name: str, stem: str) -> list[str]:
    return [a.format(stem) if "{}" in a else a for a in WRITERS[name]]


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize("stem, says, exit_code", [
    ("missing/out", ("folder 'missing' does not exist", "create it first"), 1),
    ("taken", ("it is a folder", "names a file"), 2),          # the command line is wrong
    (LONG, ("longer than the file system allows",), 1),
    (f"{LONG}/out", ("longer than the file system allows",), 1),
], ids=["missing-folder", "directory", "long-name", "long-folder"])
def test_unwritable_output_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, name, stem, says,
                                                          exit_code):
    args = writer(name, stem)
    target = args[-1]
    if stem == "taken":
        (tmp_path / target).mkdir()
    code, out, err = napkin(monkeypatch, capsys, tmp_path, *args)
    option = args[-2] if args[-2] != "-o" else "--output"
    one_error(code, err, option, *says, exit_code=exit_code)
    assert files_in(tmp_path) == [], "a file was written"


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize("target, says", [
    ("", "'' names no file"), (".", "'.': it is a folder"), ("/", "'/': it is a folder"),
    ("sub/", "'sub/': it is a folder"), ("sub/..", "'sub/..': it is a folder"),
], ids=["empty", "dot", "root", "slash", "dot-dot"])
def test_an_output_that_names_no_file_is_a_usage_error(tmp_path, monkeypatch, capsys, name, target, says):
    """regression: `napkin kernel matmul --backend triton -o ""` (or `-o .`, `-o /`) ended in a traceback
    (Path.with_suffix of an empty name); calibrate and analyze --plot took an empty name for no option."""
    (tmp_path / "sub").mkdir()
    args = [*writer(name, "x")[:-1], target]
    code, _, err = napkin(monkeypatch, capsys, tmp_path, *args)
    option = args[-2] if args[-2] != "-o" else "--output"
    one_error(code, err, f"{option}: {says}", exit_code=2)
    assert files_in(tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc")
@pytest.mark.parametrize("name", ["kernel", "draw", "calibrate-report"])
def test_a_folder_that_takes_no_files_is_not_called_missing(tmp_path, monkeypatch, capsys, name):
    """regression: `-o /proc/x.py` said "folder '/proc' does not exist" (creating a file there fails with
    ENOENT): it exists, and takes no new files."""
    args = writer(name, "/proc/out")
    code, _, err = napkin(monkeypatch, capsys, tmp_path, *args)
    line = one_error(code, err, "folder '/proc' does not take new files")   # ENOENT as root, else EACCES
    assert "does not exist" not in line


@pytest.mark.parametrize("name", ["kernel", "draw", "calibrate"])
def test_unwritable_folder(tmp_path, monkeypatch, capsys, name):
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() == 0:      # root writes anywhere: refuse the temporary file as a read-only folder would
        def refuse(*args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied")
        monkeypatch.setattr(atomic.tempfile, "mkstemp", refuse)
    else:
        folder.chmod(0o500)
    try:
        code, out, err = napkin(monkeypatch, capsys, tmp_path, *writer(name, "locked/out"))
    finally:
        folder.chmod(0o700)
    one_error(code, err, "--output", "'locked/out.", "permission denied")
    assert files_in(tmp_path) == []


# -- a full disk: nothing partial, an existing file kept ----------------------------------------------

def full_after(monkeypatch, flushes: int) -> None:
    """The disk fills up after `flushes` temporary files have been flushed."""
    calls = {"n": 0}
    real = os.fsync

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > flushes:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)
    monkeypatch.setattr(atomic.os, "fsync", fsync)


@pytest.mark.parametrize("name", ["kernel", "kernel-cuda", "draw"])
def test_full_disk_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch, capsys, name):
    args = writer(name, "out")
    (tmp_path / args[-1]).write_text("the previous version\n")
    full_after(monkeypatch, 0)
    code, out, err = napkin(monkeypatch, capsys, tmp_path, *args)
    one_error(code, err, "--output", "the disk is full", "nothing was written")
    assert files_in(tmp_path) == [args[-1]]
    assert (tmp_path / args[-1]).read_text() == "the previous version\n"


def test_cuda_source_and_loader_are_written_together_or_not_at_all(tmp_path, monkeypatch):
    full_after(monkeypatch, 1)          # the .cu fits, its loader does not
    with pytest.raises(NapkinError) as info:
        write_kernel(tmp_path / "k.cu", "cuda", "// source\n", {".py": "# loader\n"})
    assert "the disk is full" in info.value.one_line()
    assert files_in(tmp_path) == []
    monkeypatch.undo()
    written = write_kernel(tmp_path / "k.cu", "cuda", "// source\n", {".py": "# loader\n"})
    assert written == [tmp_path / "k.cu", tmp_path / "k.py"]
    assert (tmp_path / "k.cu").read_text() == "// source\n"
    assert (tmp_path / "k.py").read_text() == "# loader\n"


def test_written_files_get_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        path = atomic.write_text(tmp_path / "f.txt", "x", "--output")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644    # not mkstemp's 0o600


# -- the kernel's file names ----------------------------------------------------------------------------

@pytest.mark.parametrize("backend, output, says", [
    ("triton", "foo.cu", ("the triton backend writes one Python module", "foo.py", "--backend cuda")),
    ("triton", "foo", ("must end with .py", "name it foo.py")),
    ("cuda", "foo", ("must end with .cu", "name it foo.cu")),
    ("cuda", "foo.py", ("must end with .cu", "name it foo.cu", "--backend triton")),
])
def test_kernel_name_that_the_backend_cannot_use(tmp_path, monkeypatch, capsys, backend, output, says):
    code, out, err = napkin(monkeypatch, capsys, tmp_path, "kernel", "matmul", "--backend", backend,
                            "-o", output)
    one_error(code, err, "--output", *says)
    assert files_in(tmp_path) == []


def test_cuda_loader_sits_where_it_looks_for_its_source(tmp_path, monkeypatch, capsys):
    code, out, err = napkin(monkeypatch, capsys, tmp_path, "kernel", "matmul", "--backend", "cuda",
                            "-o", "k.cu")
    assert code == 0, err
    assert files_in(tmp_path) == ["k.cu", "k.py"]
    loader = (tmp_path / "k.py").read_text()
    assert 'with_suffix(".cu")' in loader       # the loader finds its source by its own name
    assert kernel_paths("k.cu", "cuda") == [Path("k.cu"), Path("k.py")]
