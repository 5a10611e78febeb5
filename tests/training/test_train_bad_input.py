"""`metadp train` refuses bad input with one line, status 2, no traceback, and nothing written.

Each case asserts: exit status 2; exactly one stderr line, starting ``metadp: error:`` and naming the
flag; no traceback; the ``--out`` folder not created (or, if it existed, unchanged). Most cases run
in-process (``main``); a few run the real command in a subprocess to prove that no traceback escapes.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from metadp.cli import main  # noqa: E402
from metadp.training.data import sources as data  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--data", "sinusoid", "--steps", "3", "--pool", "20", "--meta-batch", "2", "--eval-tasks", "2"]
PROTO = ["protonet", "--data", "glyphs", "--steps", "1", "--eval-tasks", "2"]  # tiny, should a refusal be missed


def snapshot(folder: Path):
    """Every file under ``folder`` with its contents' hash (None when the folder does not exist)."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_refused(argv, flag, capsys, out: Path):
    before = snapshot(out)
    code = main(["train", *argv, "--out", str(out)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, captured
    assert len(lines) == 1, lines
    assert lines[0].startswith("metadp: error: ") and flag in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert snapshot(out) == before  # not created, or unchanged
    return lines[0]


# --------------------------------------------------------------------------------- numbers and flags
_CASES = {
    # A6, A7: numeric flags out of range (NaN, inf, zero, negative)
    "meta-batch-0": (["dp-maml", "--epsilon", "1", *TINY, "--meta-batch", "0"], "--meta-batch"),
    "meta-batch-negative": (["maml", *TINY, "--meta-batch", "-2"], "--meta-batch"),
    "meta-batch-nan": (["maml", *TINY, "--meta-batch", "nan"], "--meta-batch"),
    "meta-batch-inf": (["maml", *TINY, "--meta-batch", "inf"], "--meta-batch"),
    "steps-0": (["maml", *TINY, "--steps", "0"], "--steps"),
    "steps-negative": (["maml", *TINY, "--steps", "-5"], "--steps"),
    "pool-0": (["maml", *TINY, "--pool", "0"], "--pool"),
    "inner-steps-negative": (["maml", *TINY, "--inner-steps", "-1"], "--inner-steps"),
    "inner-steps-0-reptile": (["reptile", *TINY, "--inner-steps", "0"], "--inner-steps"),
    "inner-lr-0": (["maml", *TINY, "--inner-lr", "0"], "--inner-lr"),
    "inner-lr-nan": (["maml", *TINY, "--inner-lr", "nan"], "--inner-lr"),
    "outer-lr-negative": (["maml", *TINY, "--outer-lr", "-0.1"], "--outer-lr"),
    "outer-lr-inf": (["maml", *TINY, "--outer-lr", "inf"], "--outer-lr"),
    "clip-0": (["dp-maml", "--noise", "1", *TINY, "--clip", "0"], "--clip"),
    "clip-inf": (["dp-maml", "--noise", "1", *TINY, "--clip", "inf"], "--clip"),
    "clip-nan": (["dp-maml", "--noise", "1", *TINY, "--clip", "nan"], "--clip"),
    "noise-negative": (["dp-maml", *TINY, "--noise", "-1"], "--noise"),
    "noise-nan": (["dp-maml", *TINY, "--noise", "nan"], "--noise"),
    "noise-inf": (["dp-maml", *TINY, "--noise", "inf"], "--noise"),
    "inner-noise-negative": (["dp-maml-sample", *TINY, "--inner-noise", "-1", "--noise", "1"], "--inner-noise"),
    "inner-clip-0": (["dp-reptile", *TINY, "--inner-noise", "1", "--inner-clip", "0"], "--inner-clip"),
    "count-noise-0": (["dp-maml", "--noise", "1", *TINY, "--clip-policy", "quantile", "--count-noise", "0"],
                      "--count-noise"),
    "chunk-size-0": (["maml", *TINY, "--chunk-size", "0"], "--chunk-size"),
    "eval-tasks-0": (["maml", *TINY, "--eval-tasks", "0"], "--eval-tasks"),
    "seed-negative": (["maml", *TINY, "--seed", "-1"], "--seed"),
    "delta-0": (["dp-maml", "--epsilon", "1", *TINY, "--delta", "0"], "--delta"),
    "delta-1": (["dp-maml", "--epsilon", "1", *TINY, "--delta", "1"], "--delta"),
    "delta-nan": (["dp-maml", "--epsilon", "1", *TINY, "--delta", "nan"], "--delta"),
    "epsilon-nan": (["dp-maml", *TINY, "--epsilon", "nan"], "--epsilon"),
    "epsilon-inf": (["dp-maml", *TINY, "--epsilon", "inf"], "--epsilon"),
    "epsilon-0": (["dp-maml", *TINY, "--epsilon", "0"], "--epsilon"),
    "epsilon-negative": (["dp-maml", *TINY, "--epsilon", "-1"], "--epsilon"),
    "steps-not-whole": (["maml", *TINY, "--steps", "2.5"], "--steps"),
    # A3: devices
    "device-tpu": (["maml", *TINY, "--device", "tpu"], "--device"),
    "device-garbage": (["maml", *TINY, "--device", "cuda:x"], "--device"),
    # B1, B2: flags silently clamped or dropped
    "meta-batch-above-pool": (["dp-maml", "--noise", "1", *TINY, "--meta-batch", "5000", "--pool", "100"],
                              "--meta-batch"),
    "epsilon-on-maml": (["maml", *TINY, "--epsilon", "1"], "--epsilon"),
    "noise-and-clip-on-reptile": (["reptile", *TINY, "--noise", "1", "--clip", "2"], "--noise, --clip"),
    "unit-on-maml": (["maml", *TINY, "--unit", "task"], "--unit"),
    "delta-on-maml": (["maml", *TINY, "--delta", "1e-6"], "--delta"),
    "first-order-on-reptile": (["reptile", *TINY, "--first-order"], "--first-order"),
    "clip-on-dp-reptile": (["dp-reptile", *TINY, "--inner-noise", "1", "--clip", "2"], "--clip"),
    "inner-noise-on-dp-maml": (["dp-maml", *TINY, "--noise", "1", "--inner-noise", "2"], "--inner-noise"),
    "inner-clip-on-dp-agr": (["dp-agr", *TINY, "--noise", "1", "--inner-clip", "2"], "--inner-clip"),
    "clip-policy-on-dp-maml-sample": (["dp-maml-sample", *TINY, "--noise", "1", "--clip-policy", "noisy-window"],
                                      "--clip-policy"),
    "count-noise-without-quantile": (["dp-maml", *TINY, "--noise", "1", "--count-noise", "1"], "--count-noise"),
    "raw-percentile-with-epsilon": (["dp-maml", *TINY, "--epsilon", "1", "--clip-policy", "raw-percentile"],
                                    "--clip-policy"),
    "record-vs-server-on-dp-maml": (["dp-maml", *TINY, "--noise", "1", "--unit", "record-vs-server"], "--unit"),
    "task-unit-on-dp-reptile": (["dp-reptile", *TINY, "--inner-noise", "1", "--unit", "task"], "--unit"),
    "fixed-sampler-record-unit": (["dp-maml-sample", *TINY, "--epsilon", "1", "--sampler", "fixed"], "--sampler"),
    "fixed-sampler-fractional-batch": (["dp-maml", *TINY, "--noise", "1", "--sampler", "fixed", "--meta-batch",
                                        "2.5"], "--meta-batch"),
    "visit-budget-not-calibratable": (["dp-reptile", *TINY, "--epsilon", "1", "--sampler", "poisson"],
                                      "--inner-noise"),
    "dp-needs-budget-or-noise": (["dp-maml", *TINY], "--epsilon"),
    "resume-changed-without-resume": (["maml", *TINY, "--resume-changed"], "--resume-changed"),
    "budget-below-one-step": (["dp-maml", *TINY, "--noise", "0.3", "--epsilon", "0.01"], "--epsilon"),
    # data-specific flags on other data
    "rotations-on-sinusoid": (["maml", *TINY, "--rotations"], "--rotations"),
    "norm-on-sinusoid": (["maml", *TINY, "--norm", "group"], "--norm"),
    "data-dir-on-sinusoid": (["maml", *TINY, "--data-dir", "/tmp"], "--data-dir"),
    # protonet: its own flags, and the MAML family's
    "protonet-flag-on-maml": (["maml", *TINY, "--cell", "4"], "--cell"),
    "denoiser-on-dp-maml": (["dp-maml", "--noise", "1", *TINY, "--denoiser"], "--denoiser"),
    "protonet-on-sinusoid": (["protonet", "--data", "sinusoid", "--steps", "1", "--eval-tasks", "2"], "--data"),
    "protonet-dp-pix-without-epsilon": ([*PROTO, "--obfuscation", "dp-pix", "--cell", "4"],
                                        "--epsilon"),
    "protonet-dp-pix-without-cell": ([*PROTO, "--obfuscation", "dp-pix", "--epsilon", "3"],
                                     "--cell"),
    "protonet-epsilon-without-dp-pix": ([*PROTO, "--epsilon", "3"], "--epsilon"),
    "protonet-cell-on-blur": ([*PROTO, "--obfuscation", "blur", "--radius", "1", "--cell",
                               "4"], "--cell"),
    "protonet-meta-batch": ([*PROTO, "--meta-batch", "4"], "--meta-batch"),
    "protonet-resume": ([*PROTO, "--resume"], "--resume"),
    "protonet-ways-1": ([*PROTO, "--ways", "1"], "--ways"),
    "protonet-denoise-weight-alone": ([*PROTO, "--denoise-weight", "2"], "--denoise-weight"),
    "protonet-gaussian-sigma-above-1": ([*PROTO, "--obfuscation", "gaussian", "--sigma", "30"],
                                        "--sigma"),
    "protonet-epsilon-nan": ([*PROTO, "--obfuscation", "dp-pix", "--cell", "4", "--epsilon",
                              "nan"], "--epsilon"),
}


@pytest.mark.parametrize("argv, flag", list(_CASES.values()), ids=list(_CASES))
def test_refused_before_anything_is_written(argv, flag, capsys, tmp_path):
    assert_refused(argv, flag, capsys, tmp_path / "run")


def test_cuda_without_cuda_is_one_line(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    line = assert_refused(["maml", *TINY, "--device", "cuda"], "--device", capsys, tmp_path / "run")
    assert "CUDA is not available" in line


def test_protonet_more_ways_than_classes(capsys, tmp_path):
    # synthetic glyphs hold out 50 classes: 60-way episodes cannot be drawn from them
    assert_refused([*PROTO, "--ways", "60"], "--ways", capsys, tmp_path / "run")


# ----------------------------------------------------------------------------------- A1, A2: data
def test_metadp_data_not_a_folder(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("METADP_DATA", str(tmp_path / "absent"))
    assert_refused(["maml", "--data", "omniglot", "--steps", "1"], "METADP_DATA", capsys, tmp_path / "run")


def test_data_dir_not_a_folder(capsys, tmp_path):
    assert_refused(["maml", "--data", "omniglot", "--data-dir", str(tmp_path / "absent"), "--steps", "1"],
                   "--data-dir", capsys, tmp_path / "run")


@pytest.mark.parametrize("bad", [*data.BACKGROUND_ZIPS, data.ONE_SHOT_ZIP])
def test_a_data_zip_that_is_not_a_zip(bad, monkeypatch, capsys, tmp_path):
    folder = tmp_path / "omniglot"
    folder.mkdir()
    for name in (*data.BACKGROUND_ZIPS, data.ONE_SHOT_ZIP):
        source = Path("/work/shared/data/omniglot") / name
        if name == bad or not source.exists():
            (folder / name).write_bytes(b"not a zip archive\n" * 10)
        else:
            os.symlink(source, folder / name)
    monkeypatch.setenv("METADP_DATA", str(folder))
    line = assert_refused(["maml", "--data", "omniglot", "--steps", "1"], "--data", capsys, tmp_path / "run")
    assert "is not a zip archive" in line


def test_protonet_needs_no_one_shot_zip_but_refuses_a_missing_background_zip(monkeypatch, capsys, tmp_path):
    folder = tmp_path / "omniglot"
    folder.mkdir()
    (folder / data.BACKGROUND_ZIPS[0]).write_bytes(b"x")
    line = assert_refused(["protonet", "--data", "omniglot", "--data-dir", str(folder), "--steps", "1"], "--data",
                          capsys, tmp_path / "run")
    assert data.BACKGROUND_ZIPS[1] in line


# ------------------------------------------------------------------------------------ A4: --out
def test_out_is_a_file(capsys, tmp_path):
    out = tmp_path / "file"
    out.write_text("keep me")
    assert_refused(["maml", *TINY], "--out", capsys, out)
    assert out.read_text() == "keep me"


def test_out_under_a_file(capsys, tmp_path):
    (tmp_path / "file").write_text("keep me")
    assert_refused(["maml", *TINY], "--out", capsys, tmp_path / "file" / "run")


def test_out_where_no_folder_can_be_made(capsys, tmp_path):
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        out = locked / "run"
    elif Path("/proc/self").exists():  # root may write anywhere, but nothing can be created under /proc
        out = Path(f"/proc/metadp-test-{os.getpid()}/run")
    else:
        pytest.skip("no place this process cannot write to")
    assert_refused(["maml", *TINY], "--out", capsys, out)


# ------------------------------------------------------------- A5, B3: the folder of an earlier run
_RUN = ["dp-maml", "--epsilon", "4", "--noise", "1", *TINY]


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("earlier") / "run"
    assert main(["train", *_RUN, "--out", str(out)]) == 0
    return out


@pytest.fixture
def run_copy(earlier_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(earlier_run, out)
    return out


def test_a_second_run_into_a_run_folder_needs_resume(run_copy, capsys):
    line = assert_refused(_RUN, "--resume", capsys, run_copy)
    assert "holds a run" in line and "--out" in line


_CHANGED = {
    "epsilon": (["--epsilon", "8"], "--epsilon"),
    "noise": (["--noise", "2"], "--noise"),
    "steps": (["--steps", "5"], "--steps"),
    "delta": (["--delta", "1e-6"], "--delta"),
    "seed": (["--seed", "1"], "--seed"),
    "clip": (["--clip", "2"], "--clip"),
    "meta-batch": (["--meta-batch", "3"], "--meta-batch"),
    "sampler": (["--sampler", "fixed"], "--sampler"),
    "unit": (["--unit", "record"], "--unit"),
    "pool": (["--pool", "30"], "--pool"),
}


@pytest.mark.parametrize("extra, flag", list(_CHANGED.values()), ids=list(_CHANGED))
def test_resume_with_changed_settings_is_refused(extra, flag, run_copy, capsys):
    line = assert_refused([*_RUN, *extra, "--resume"], flag, capsys, run_copy)
    assert "--resume" in line


def test_resume_on_other_data_or_algorithm_is_refused_even_with_resume_changed(run_copy, capsys):
    argv = ["dp-maml", "--epsilon", "4", "--noise", "1", "--data", "glyphs", "--steps", "3", "--pool", "20",
            "--meta-batch", "2", "--eval-tasks", "2", "--resume", "--resume-changed"]
    assert_refused(argv, "--data", capsys, run_copy)
    argv = ["dp-agr", "--epsilon", "4", "--noise", "1", *TINY, "--sampler", "poisson", "--resume", "--resume-changed"]
    assert_refused(argv, "algorithm", capsys, run_copy)


def test_resume_changed_cannot_change_what_a_release_is(run_copy, capsys):
    # another noise: the ledger's releases and the new ones would be different events in one ledger
    line = assert_refused([*_RUN, "--noise", "2", "--resume", "--resume-changed"], "--noise", capsys, run_copy)
    assert "ledger-" in line and "--out" in line


# ------------------------------------------------------------------------ no traceback, for real
@pytest.mark.slow  # the refusals run in-process above; this checks a real process's stderr (~20 s)
def test_no_traceback_from_the_real_command(tmp_path):
    garbage = tmp_path / "omniglot"
    garbage.mkdir()
    for name in (*data.BACKGROUND_ZIPS, data.ONE_SHOT_ZIP):
        (garbage / name).write_bytes(b"garbage")
    (tmp_path / "file").write_text("x")
    out = str(tmp_path / "run")
    cases = [
        (["train", "maml", *TINY, "--device", "cuda" if not torch.cuda.is_available() else "tpu"], "--device"),
        (["train", "dp-maml", *TINY, "--epsilon", "nan"], "--epsilon"),
        (["train", "dp-maml", *TINY, "--epsilon", "1", "--meta-batch", "0"], "--meta-batch"),
        (["train", "maml", "--data", "omniglot", "--data-dir", str(garbage), "--steps", "1"], "--data"),
        (["train", "maml", *TINY, "--out", str(tmp_path / "file")], "--out"),
    ]
    # one interpreter for all (importing torch dominates): each through main(), its status after its line
    script = ("import sys, json\nfrom metadp.cli import main\n"
              "for argv in json.loads(sys.argv[1]):\n    print('STATUS', main(argv), file=sys.stderr, flush=True)\n")
    result = subprocess.run([sys.executable, "-c", script, json.dumps([[*argv, "--out", out] if "--out" not in argv
                                                                        else argv for argv, _ in cases])],
                            capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 * len(cases), lines
    for (argv, flag), line, status in zip(cases, lines[0::2], lines[1::2]):
        assert status == "STATUS 2" and line.startswith("metadp: error: ") and flag in line, (argv, line)
    assert not Path(out).exists()
    # and the command as installed (python -m metadp): exit status 2, one line
    result = subprocess.run([sys.executable, "-m", "metadp", "train", "dp-maml", *TINY, "--epsilon", "inf", "--out",
                             out], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "--epsilon" in result.stderr
    assert not Path(out).exists()


@pytest.mark.parametrize("flags, words", [
    (["dp-maml", "--sampler", "fixed", "--meta-batch", "2.5", "--noise", "1"],
     "--meta-batch 2.5 with --sampler fixed: fixed-size batches need a whole number of tasks a step"),
    (["dp-maml-sample", "--sampler", "fixed", "--meta-batch", "4", "--unit", "record", "--noise", "1"],
     "--sampler fixed: dp-maml-sample has no record-level bound for fixed-size task batches"),
    (["dp-reptile", "--sampler", "poisson", "--meta-batch", "4", "--epsilon", "2"],
     "charged per visit, and visits are random under --sampler poisson"),
])
def test_what_the_runs_sampling_scheme_cannot_do_is_refused_in_one_line(tmp_path, capsys, flags, words):
    # each refusal is read off the run's metadp.sampling scheme (issue 29), never off the sampler's name
    out = tmp_path / "run"
    assert main(["train", *flags, "--data", "sinusoid", "--pool", "20", "--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and err.count("\n") == 0 and not out.exists()
