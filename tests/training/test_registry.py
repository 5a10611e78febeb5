"""The algorithm registry (metadp.training.algorithms): a new algorithm is one registered object.

The toy algorithms below are registered here, in the test, and run through the real loop, the flags
and the views without any other module knowing their names.
"""

import argparse
import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from metadp.training import algorithms  # noqa: E402

from metadp.training.data import datasets  # noqa: E402
from metadp.training.algorithms import MetaGradient, register  # noqa: E402
from metadp.training.algorithms.models import MLP  # noqa: E402
from metadp.training.run.parser import add_train_parser  # noqa: E402
from metadp.sampling import of_lot  # noqa: E402
from metadp.training.data.tasks import SinusoidPool  # noqa: E402
from metadp.training.run.trainer import TrainConfig, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def mse(out, y):
    return ((out - y) ** 2).mean()


@pytest.fixture
def registered():
    """Registers algorithms for one test and removes them after."""
    added = []

    def add(algorithm):
        added.append(algorithm.name)
        return register(algorithm)

    yield add
    for name in added:
        algorithms.REGISTRY.pop(name, None)


def _run(algorithm, tmp, **kw):
    torch.manual_seed(0)
    config = TrainConfig(algorithm=algorithm, steps=2, meta_batch=4, clip=1.0, noise_multiplier=1.0, seed=5, **kw)
    return train(MLP(), SinusoidPool(40, 5, 5, seed=1), mse, config, tmp)


def test_a_registered_copy_of_dp_maml_trains_exactly_as_dp_maml(registered, tmp_path):
    registered(dataclasses.replace(algorithms.get("dp-maml"), name="toy-dp-maml", description="a copy"))
    toy, ref = _run("toy-dp-maml", tmp_path / "toy"), _run("dp-maml", tmp_path / "ref")
    assert toy.report["algorithm"] == "toy-dp-maml" and toy.steps_done == 2
    for k in ref.params:
        assert torch.equal(toy.params[k], ref.params[k]), k
    assert toy.losses == ref.losses
    assert [v["epsilon"] for v in toy.report["views"]] == [v["epsilon"] for v in ref.report["views"]]


def test_a_new_contribution_is_a_callable_on_the_algorithm(registered, tmp_path):
    calls = []

    def zero_update(alg, model, params, pool, rows, loss_fn, config, noise_gen):
        calls.append(rows.numel())
        return {k: torch.zeros((rows.numel(),) + v.shape) for k, v in params.items()}, torch.zeros(rows.numel())

    registered(MetaGradient("toy-still", "never moves", private=False, contribution=zero_update, optimizer="sgd"))
    torch.manual_seed(0)
    start = {k: v.clone() for k, v in MLP().state_dict().items()}
    result = _run_non_private("toy-still", tmp_path)
    assert len(calls) == 2
    for k, v in result.params.items():
        assert torch.equal(v, start[k]), k  # a zero update with plain SGD leaves the parameters where they were
    assert result.report["views"] == [] and result.epsilon_spent == 0.0


def _run_non_private(algorithm, tmp):
    torch.manual_seed(0)
    config = TrainConfig(algorithm=algorithm, steps=2, meta_batch=4, seed=5)
    return train(MLP(), SinusoidPool(40, 5, 5, seed=1), mse, config, tmp)


def test_flags_and_views_read_the_registry(registered):
    registered(dataclasses.replace(algorithms.get("dp-reptile"), name="toy-reptile", description="a copy"))
    parser = argparse.ArgumentParser()
    add_train_parser(parser.add_subparsers(dest="command"), lambda flag, kind: kind, argparse.HelpFormatter)
    args = parser.parse_args(["train", "toy-reptile", "--inner-noise", "2", "--steps", "3"])
    assert args.algorithm == "toy-reptile"
    plan = of_lot("one-pass", 20, 4)  # 20 tasks, 5 steps a pass
    assert algorithms.views("toy-reptile", plan, noise=1.0, inner_noise=2.0) == \
        algorithms.views("dp-reptile", plan, noise=1.0, inner_noise=2.0)
    with pytest.raises(ValueError, match="already registered"):
        register(algorithms.get("dp-maml"))
    with pytest.raises(ValueError, match="algorithm must be one of .*'dp-maml'.*got 'nope'"):
        algorithms.get("nope")


def test_a_registered_data_set_is_a_choice_of_data(registered):
    toy = datasets.register(dataclasses.replace(datasets.get("glyphs"), name="toy-glyphs"))
    try:
        parser = argparse.ArgumentParser()
        add_train_parser(parser.add_subparsers(dest="command"), lambda flag, kind: kind, argparse.HelpFormatter)
        assert parser.parse_args(["train", "maml", "--data", "toy-glyphs"]).data == "toy-glyphs"
        assert "toy-glyphs" in datasets.names(images=True)
    finally:
        datasets.REGISTRY.pop(toy.name)
    with pytest.raises(ValueError, match="data set must be one of .*'sinusoid'.*got 'nope'"):
        datasets.get("nope")


@pytest.mark.parametrize("registry, own", [(algorithms.REGISTRY, ("algorithms.py",)),
                                           (datasets.REGISTRY, ("datasets.py", "omniglot.py"))])
def test_no_training_module_tests_a_registered_name(registry, own):
    """Only a registry names its entries (omniglot.py names its folder): a name as a string literal
    elsewhere (but a docstring or a field's default) is a test on it."""
    names = set(registry)
    found = []
    for path in sorted((ROOT / "metadp" / "training").glob("*.py")):
        if path.name in own:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr)}
        docstrings |= {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)}  # field defaults
        found += [f"{path.name}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value in names and id(n) not in docstrings]
    assert found == [], found


def test_the_registry_and_the_train_flags_import_without_torch():
    block = ("import sys\n"
             "class NoTorch:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] == 'torch': raise ImportError('no torch')\n"
             "sys.meta_path.insert(0, NoTorch())\n"
             "import metadp.training.algorithms, metadp.training.data.datasets, metadp.training.run.parser, metadp.cli\n"
             "assert 'torch' not in sys.modules\n"
             "print(len(metadp.training.algorithms.REGISTRY))\n")
    out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(algorithms.REGISTRY)
