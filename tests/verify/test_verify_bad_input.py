"""`metadp verify` refuses bad input: exit status 2, one stderr line `metadp: error: ...` naming the flag, no
traceback, nothing sampled or written. (Cases already in test_command.py are not repeated here: no mechanism,
gaussian without --noise, --epsilons a,b, poisson without --rate, a mechanism with --crosscheck,
--crosscheck of an episodic plan, plan without a file.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from metadp.cli import main

ROOT = Path(__file__).resolve().parents[2]
G = ["verify", "gaussian", "--noise", "1", "--epsilons", "0.5,1", "--samples", "100"]

CASES = [
    # (id, argv, the flag the message must name)
    ("plot-missing-folder", G + ["--plot", "missing/verify.png"], "--plot"),
    ("plot-bad-extension", G + ["--plot", "verify.jpg"], "--plot"),
    ("plot-existing-file", G + ["--plot", "existing.png"], "--plot"),
    ("overwrite-without-plot", G + ["--overwrite"], "--overwrite"),
    ("laplace-without-scale", ["verify", "laplace", "--samples", "100"], "--scale"),
    ("dp-pix-without-epsilon", ["verify", "dp-pix", "--cell", "2", "--samples", "100"], "--epsilon"),
    ("dp-pix-without-cell", ["verify", "dp-pix", "--epsilon", "1", "--samples", "100"], "--cell"),
    ("dp-pix-m-above-cell", ["verify", "dp-pix", "--epsilon", "1", "--cell", "2", "--m", "5"], "--m"),
    ("dp-pix-cell-0", ["verify", "dp-pix", "--epsilon", "1", "--cell", "0"], "--cell"),
    ("dp-pix-partial-cell-1", ["verify", "dp-pix", "--epsilon", "1", "--cell", "1", "--partial-cell"],
     "--partial-cell"),
    ("noise-negative", ["verify", "gaussian", "--noise", "-1"], "--noise"),
    ("noise-nan", ["verify", "gaussian", "--noise", "nan"], "--noise"),
    ("noise-inf", ["verify", "gaussian", "--noise", "inf"], "--noise"),
    ("noise-text", ["verify", "gaussian", "--noise", "abc"], "--noise"),
    ("claim-noise-zero", ["verify", "gaussian", "--noise", "1", "--claim-noise", "0"], "--claim-noise"),
    ("scale-negative", ["verify", "laplace", "--scale", "-1"], "--scale"),
    ("scale-with-gaussian", G + ["--scale", "1"], "--scale"),
    ("rate-above-1", ["verify", "poisson", "--rate", "1.5", "--noise", "1"], "--rate"),
    ("rate-negative", ["verify", "poisson", "--rate", "-0.1", "--noise", "1"], "--rate"),
    ("rate-nan", ["verify", "poisson", "--rate", "nan", "--noise", "1"], "--rate"),
    ("steps-0", ["verify", "poisson", "--rate", "0.1", "--noise", "1", "--steps", "0"], "--steps"),
    ("samples-0", ["verify", "gaussian", "--noise", "1", "--samples", "0"], "--samples"),
    ("alpha-0", G + ["--alpha", "0"], "--alpha"),
    ("alpha-above-1", G + ["--alpha", "1.5"], "--alpha"),
    ("power-1", G + ["--power", "1"], "--power"),
    ("violation-negative", G + ["--violation=-0.1"], "--violation"),
    ("seed-negative", G + ["--seed=-1"], "--seed"),
    ("epsilons-empty", ["verify", "gaussian", "--noise", "1", "--epsilons", ""], "--epsilons"),
    ("epsilons-negative", ["verify", "gaussian", "--noise", "1", "--epsilons=-1,1"], "--epsilons"),
    ("epsilons-nan", ["verify", "gaussian", "--noise", "1", "--epsilons", "nan,1"], "--epsilons"),
    ("epsilons-repeated", ["verify", "gaussian", "--noise", "1", "--epsilons", "1,1"], "--epsilons"),
    ("plan-missing-file", ["verify", "plan", "missing.toml", "--samples", "100"], "verify plan FILE"),
    ("crosscheck-missing-file", ["verify", "--crosscheck", "missing.toml"], "--crosscheck"),
    ("noise-with-crosscheck", ["verify", "--crosscheck", "missing.toml", "--noise", "1"], "--noise"),
]


@pytest.mark.parametrize("argv, flag", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line_naming_the_flag(argv, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing.png").write_bytes(b"keep me")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("metadp: error: "), captured.err
    assert flag in lines[0] and "Traceback" not in captured.err
    assert captured.out == ""  # refused before the plan line: nothing sampled
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    assert (tmp_path / "existing.png").read_bytes() == b"keep me"


def test_a_plot_into_a_missing_folder_is_refused_before_sampling_in_a_real_process(tmp_path):
    # it sampled first, then died with a FileNotFoundError traceback
    result = subprocess.run([sys.executable, "-m", "metadp", *G, "--plot", str(tmp_path / "no" / "v.png")],
                            capture_output=True, text=True, timeout=120, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("metadp: error: --plot")
    assert list(tmp_path.iterdir()) == []
