"""Accounting the DataLoader users have (metadp.integrations.loaders, and the Opacus accountant reading it).

The oracle is a plan written by hand for what each loader does, certified by `metadp plan`'s own function
(plan_epsilon): Opacus's Poisson loader is `poisson` at its rate; a shuffling loader is `shuffle` (one Gaussian a
pass, Chua et al.'s certified lower bound where the batches are equal); a sequential one is one Gaussian an epoch
(`none`, a step an epoch); a DistributedSampler's ranks together are one shuffled pass in batches of ranks x
batch; a loader drawing with replacement (RandomSampler(replacement=True), a uniform WeightedRandomSampler) is
`with_replacement` (each copy moves the sum by 2C: metadp.mechanisms.replacement). A loader no plan describes
(non-uniform weights, a sampler of one's own, padded shards) is refused with the reason. Under Opacus with `accountant="metadp"` and `poisson_sampling=False`, a real training
loop over each loader reports the same epsilon, where it used to report the Poisson number.
"""

import math
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, RandomSampler, Sampler, TensorDataset, WeightedRandomSampler  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

from metadp.integrations.loaders import account_loader, read_loader  # noqa: E402
from metadp.plan import loads_plan, plan_epsilon  # noqa: E402

Z, DELTA = 1.3, 1e-5
pytestmark = [pytest.mark.filterwarnings("ignore:Secure RNG turned off:UserWarning"),  # Opacus, for experiments
              pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")]  # inputs need no grad


def _data(n):
    return TensorDataset(torch.randn(n, 4), torch.randn(n, 1))


def _hand(scheme, n, steps, **sampling):
    keys = "".join(f"{k} = {v}\n" for k, v in sampling.items())
    return plan_epsilon(loads_plan(f'name = "by hand"\nunit = "record"\ndelta = {DELTA}\nsteps = {steps}\n[sampling]\n'
                                   f'scheme = "{scheme}"\npopulation = {n}\n{keys}[noise]\nmechanism = "gaussian"\n'
                                   f"multiplier = {Z}\n"))


def _poisson_loader(n, batch):
    from opacus.data_loader import DPDataLoader

    return DPDataLoader.from_data_loader(DataLoader(_data(n), batch_size=batch))


def _distributed(n, batch, shuffle=True, drop_last=False, ranks=3):
    sampler = DistributedSampler(_data(n), num_replicas=ranks, rank=1, shuffle=shuffle, drop_last=drop_last)
    return DataLoader(_data(n), batch_size=batch, sampler=sampler)


# name: (loader, epochs, the plan written by hand, scheme read, certified lower bound expected)
ROWS = {
    "shuffle, equal batches": (lambda: DataLoader(_data(720), batch_size=30, shuffle=True), 2,
                               lambda: _hand("shuffle", 720, 48, batch_size=30), "shuffle", True),
    "shuffle, drop_last": (lambda: DataLoader(_data(725), batch_size=30, shuffle=True, drop_last=True), 2,
                           lambda: _hand("none", 725, 2), "shuffle", False),
    "shuffle, a short last batch": (lambda: DataLoader(_data(725), batch_size=30, shuffle=True), 2,
                                    lambda: _hand("none", 725, 2), "shuffle", False),
    "sequential": (lambda: DataLoader(_data(720), batch_size=30), 3, lambda: _hand("none", 720, 3), "none", True),
    "DistributedSampler, 3 ranks": (lambda: _distributed(720, 10), 2, lambda: _hand("shuffle", 720, 48, batch_size=30),
                                    "shuffle", True),
    "DistributedSampler, drop_last": (lambda: _distributed(721, 10, drop_last=True), 2,
                                      lambda: _hand("none", 721, 2), "shuffle", False),
    "DistributedSampler, no shuffle": (lambda: _distributed(720, 10, shuffle=False), 2, lambda: _hand("none", 720, 2),
                                       "none", True),
    "WeightedRandomSampler, uniform weights": (
        lambda: DataLoader(_data(720), batch_size=30, sampler=WeightedRandomSampler(torch.ones(720), 720)), 2,
        lambda: _hand("with_replacement", 720, 48, batch_size=30), "with_replacement", True),
    "RandomSampler with replacement, a short last batch": (
        lambda: DataLoader(_data(720), batch_size=32, sampler=RandomSampler(_data(720), replacement=True)), 2,
        lambda: _hand("with_replacement", 720, 46, batch_size=32), "with_replacement", False),
    "WeightedRandomSampler, uniform, without replacement": (
        lambda: DataLoader(_data(720), batch_size=30,
                           sampler=WeightedRandomSampler(torch.ones(720), 720, replacement=False)), 2,
        lambda: _hand("shuffle", 720, 48, batch_size=30), "shuffle", True),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_each_loader_is_accounted_as_the_plan_of_what_it_does(row):
    make, epochs, hand, scheme, lower = ROWS[row]
    account = account_loader(make(), noise_multiplier=Z, epochs=epochs, delta=DELTA)
    expected = hand()
    assert account.loader.scheme == scheme and account.loader.refusal is None
    assert account.epsilon == pytest.approx(expected.epsilon, rel=1e-9)
    if lower:
        assert account.epsilon_lower == pytest.approx(expected.epsilon_lower, rel=1e-9)
        assert account.epsilon_lower <= account.epsilon
    else:
        assert account.epsilon_lower is None  # unequal batches: Chua et al.'s test does not apply


def test_opacus_poisson_loader_is_the_poisson_plan():
    pytest.importorskip("opacus")
    account = account_loader(_poisson_loader(720, 30), noise_multiplier=Z, epochs=2, delta=DELTA)
    expected = _hand("poisson", 720, 48, rate=1 / 24)
    assert account.loader.scheme == "poisson" and account.loader.rate == pytest.approx(1 / 24)
    assert account.epsilon == pytest.approx(expected.epsilon, rel=1e-9)
    assert account.epsilon < 1.3  # the same rate's shuffle plan is certified in [0.77, 4.83]


def test_a_long_run_with_drop_last_is_charged_every_epoch():
    # 725 records in batches of 30 with drop_last: 24 steps an epoch. 200 epochs are 4,800 steps; a shuffle plan
    # of 4,800 steps would count ceil(4800 x 30 / 725) = 199 passes: the plan written counts all 200
    account = account_loader(DataLoader(_data(725), batch_size=30, shuffle=True, drop_last=True), noise_multiplier=Z,
                             steps=4800, delta=DELTA)
    assert account.plan.units()[0].steps == 200
    assert account.epsilon == pytest.approx(_hand("none", 725, 200).epsilon, rel=1e-9)
    partial = account_loader(DataLoader(_data(725), batch_size=30, shuffle=True, drop_last=True), noise_multiplier=Z,
                             steps=4801, delta=DELTA)
    assert partial.plan.units()[0].steps == 201  # a step into the next epoch charges that pass in full


class _OwnSampler(Sampler):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


@pytest.mark.parametrize("make, words", [
    (lambda: DataLoader(_data(720), batch_size=30, sampler=WeightedRandomSampler(torch.linspace(1, 2, 720), 720)),
     "WeightedRandomSampler with non-uniform weights"),
    (lambda: DataLoader(_data(720), batch_size=30, sampler=WeightedRandomSampler(torch.ones(700), 720)),
     "WeightedRandomSampler over 700 weights for a data set of 720"),
    (lambda: DataLoader(_data(20), batch_size=30, sampler=RandomSampler(_data(20), replacement=True)),
     "more draws than records"),
    (lambda: DataLoader(_data(720), batch_size=30, sampler=WeightedRandomSampler(torch.ones(720), 300,
                                                                                 replacement=False)),
     "not one shuffled pass an epoch"),
    (lambda: DataLoader(_data(720), batch_size=30, sampler=_OwnSampler(720)), "from _OwnSampler"),
    (lambda: _distributed(721, 10), "pads 721 records to 723"),
    (lambda: DataLoader(_data(720), batch_size=30, sampler=RandomSampler(_data(720), num_samples=100)),
     "not one shuffled pass an epoch"),
])
def test_a_loader_no_plan_describes_is_refused_with_the_reason(make, words):
    found = read_loader(make())
    assert found.scheme is None and words in found.refusal
    with pytest.raises(ValueError, match="data_loader"):
        account_loader(make(), noise_multiplier=Z, epochs=1)


def test_bad_arguments_are_refused():
    loader = DataLoader(_data(720), batch_size=30, shuffle=True)
    with pytest.raises(ValueError, match="must be a torch.utils.data.DataLoader"):
        read_loader([1, 2, 3])
    with pytest.raises(ValueError, match="exactly one of steps and epochs"):
        account_loader(loader, noise_multiplier=Z)
    with pytest.raises(ValueError, match="epochs must be a finite number > 0"):
        account_loader(loader, noise_multiplier=Z, epochs=math.inf)
    with pytest.raises(ValueError, match="noise.multiplier"):
        account_loader(loader, noise_multiplier=-1.0, epochs=1)


# -- under Opacus, with accountant="metadp" ----------------------------------------------------------------
def _train(engine, loader, epochs, poisson_sampling=False):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                   noise_multiplier=Z, max_grad_norm=1.0,
                                                   poisson_sampling=poisson_sampling)
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return engine


@pytest.mark.parametrize("row", [r for r in ROWS if not r.startswith("DistributedSampler")])
def test_opacus_with_the_metadp_accountant_reports_the_plan_of_its_loader(row):
    opacus = pytest.importorskip("opacus")
    import metadp.integrations.opacus  # noqa: F401 - registers "metadp"

    make, epochs, hand, scheme, lower = ROWS[row]
    engine = _train(opacus.PrivacyEngine(accountant="metadp"), make(), epochs)
    expected = hand()
    assert engine.accountant.loader.scheme == scheme
    assert engine.get_epsilon(DELTA) == pytest.approx(expected.epsilon, rel=1e-9)
    bounds = engine.accountant.get_epsilon_bounds(DELTA)
    assert bounds.scheme == scheme and (bounds.epsilon_lower is not None) == lower
    # what Opacus's own accountant says of the same run: the Poisson number, far below the certified lower bound
    if row == "shuffle, equal batches":
        assert bounds.epsilon_lower == pytest.approx(0.7704, abs=1e-3) and bounds.epsilon_upper == pytest.approx(
            4.827, abs=1e-3)
        rdp = _train(opacus.PrivacyEngine(accountant="rdp"), make(), epochs)
        assert rdp.get_epsilon(DELTA) < bounds.epsilon_upper / 3  # Opacus's RDP Poisson number (1.52)
    if row == "WeightedRandomSampler, uniform weights":  # Opacus #813's loader: Poisson is a certified overclaim
        assert bounds.epsilon_lower == pytest.approx(10.32, abs=1e-2)
        rdp = _train(opacus.PrivacyEngine(accountant="rdp"), make(), epochs)
        assert rdp.get_epsilon(DELTA) < bounds.epsilon_lower / 5  # Opacus's RDP Poisson number at rate 1/24


def test_opacus_poisson_run_and_its_state_dict_keep_the_poisson_number():
    opacus = pytest.importorskip("opacus")
    from metadp.integrations.opacus import MetadpAccountant

    engine = _train(opacus.PrivacyEngine(accountant="metadp"), DataLoader(_data(720), batch_size=30), 2,
                    poisson_sampling=True)
    assert engine.accountant.loader.scheme == "poisson"
    assert engine.get_epsilon(DELTA) == pytest.approx(_hand("poisson", 720, 48, rate=1 / 24).epsilon, rel=1e-9)
    shuffled = _train(opacus.PrivacyEngine(accountant="metadp"), DataLoader(_data(720), batch_size=30, shuffle=True), 2)
    again = MetadpAccountant()
    again.load_state_dict(shuffled.accountant.state_dict())
    assert again.loader == shuffled.accountant.loader and again.get_epsilon(DELTA) == shuffled.get_epsilon(DELTA)


def test_opacus_refuses_a_weighted_loader_before_training():
    opacus = pytest.importorskip("opacus")
    import metadp.integrations.opacus  # noqa: F401

    loader = DataLoader(_data(720), batch_size=30, sampler=WeightedRandomSampler(torch.linspace(1, 2, 720), 720))
    with pytest.raises(ValueError, match="WeightedRandomSampler with non-uniform weights"):
        _train(opacus.PrivacyEngine(accountant="metadp"), loader, 1)


def test_an_accountant_that_cannot_see_the_loader_says_so():
    pytest.importorskip("opacus")
    from metadp.integrations.opacus import MetadpAccountant, PoissonAssumptionWarning

    accountant = MetadpAccountant()
    with pytest.warns(PoissonAssumptionWarning, match="cannot see this run's data loader"):
        accountant.get_optimizer_hook_fn(sample_rate=0.01)
    accountant.read_loader(DataLoader(_data(720), batch_size=30, shuffle=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PoissonAssumptionWarning)
        accountant.get_optimizer_hook_fn(sample_rate=1 / 24)



def test_an_interpreter_without_frames_gets_the_warning_not_a_crash(monkeypatch):
    """``inspect.currentframe()`` is None on interpreters without stack frames: the accountant then cannot read
    the loader off ``make_private`` and says so, as when it is called from elsewhere."""
    pytest.importorskip("opacus")
    import inspect

    from metadp.integrations.opacus import MetadpAccountant, PoissonAssumptionWarning

    monkeypatch.setattr(inspect, "currentframe", lambda: None)
    with pytest.warns(PoissonAssumptionWarning, match="cannot see this run's data loader"):
        hook = MetadpAccountant().get_optimizer_hook_fn(sample_rate=0.01)
    assert callable(hook)

def test_make_private_checked_calibrates_the_noise_for_a_shuffling_loader():
    opacus = pytest.importorskip("opacus")
    from metadp.integrations.opacus import make_private_checked

    engine = opacus.PrivacyEngine(accountant="metadp")
    model = nn.Linear(4, 1)
    _, optimizer, loader = make_private_checked(engine, module=model, optimizer=torch.optim.SGD(model.parameters(),
                                                                                                lr=0.05),
                                                data_loader=DataLoader(_data(720), batch_size=30, shuffle=True),
                                                poisson_sampling=False, target_epsilon=3.0, target_delta=DELTA,
                                                epochs=2, max_grad_norm=1.0)
    z = optimizer.noise_multiplier
    assert z > 1.3  # the shuffle plan at z = 1.3 is 4.83 > 3: Opacus's Poisson calibration would have kept it lower
    for _ in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    epsilon = engine.get_epsilon(DELTA)
    assert epsilon <= 3.0 and epsilon == pytest.approx(3.0, rel=2e-3)


def test_gradient_accumulation_is_counted_in_the_loaders_batches():
    # a step every 2 batches: 24 releases of 60 records over 2 epochs. Opacus records rate 2 / len(loader) per
    # release; the plan must still span 2 epochs (each record in one release an epoch), not 1
    opacus = pytest.importorskip("opacus")
    import metadp.integrations.opacus  # noqa: F401

    engine = opacus.PrivacyEngine(accountant="metadp")
    model = nn.Linear(4, 1)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
        data_loader=DataLoader(_data(720), batch_size=30, shuffle=True), noise_multiplier=Z, max_grad_norm=1.0,
        poisson_sampling=False)
    for _ in range(2):
        for i, (x, y) in enumerate(loader):
            nn.functional.mse_loss(model(x), y).backward()
            if i % 2 == 1:
                optimizer.step()
                optimizer.zero_grad()
    assert engine.accountant.history == [(Z, 2 / 24, 24)]
    assert engine.get_epsilon(DELTA) == pytest.approx(_hand("shuffle", 720, 48, batch_size=30).epsilon, rel=1e-9)


def test_a_history_whose_noise_changed_composes_each_runs_plan():
    # two runs of one multiplier on a shuffling loader: each is charged as its own plan (a partial pass in full)
    # and the two are composed; the bound is the PLD composition of the two hand-written plans' events
    pytest.importorskip("opacus")
    from metadp.accounting import Composed
    from metadp.accounting.pld import PldAccountant
    from metadp.integrations.opacus import MetadpAccountant

    accountant = MetadpAccountant()
    accountant.read_loader(DataLoader(_data(720), batch_size=30, shuffle=True))
    accountant.history = [(1.3, 1 / 24, 24), (2.0, 1 / 24, 36)]  # one epoch at z = 1.3, then 1.5 at z = 2
    bounds = accountant.get_epsilon_bounds(DELTA)
    first = loads_plan(f'name = "a"\nunit = "record"\ndelta = {DELTA}\nsteps = 24\n[sampling]\nscheme = "shuffle"\n'
                       'population = 720\nbatch_size = 30\n[noise]\nmechanism = "gaussian"\nmultiplier = 1.3\n')
    second = loads_plan(f'name = "b"\nunit = "record"\ndelta = {DELTA}\nsteps = 36\n[sampling]\nscheme = "shuffle"\n'
                        'population = 720\nbatch_size = 30\n[noise]\nmechanism = "gaussian"\nmultiplier = 2.0\n')
    expected = PldAccountant(max_seconds=math.inf).compose(Composed((first.event(), second.event())))
    assert bounds.epsilon_upper == pytest.approx(expected.get_epsilon_bounds(DELTA).epsilon_upper, rel=1e-9)
    assert bounds.epsilon_lower is None and "noise multipliers changed" in bounds.notes[0]
    # one Gaussian a pass: 1 pass at z = 1.3 and 2 at z = 2 (the half epoch charged in full) compose to one Gaussian
    # of multiplier (1 / 1.3^2 + 2 / 2^2)^(-1/2); without that half epoch's charge it would be (1 / 1.3^2 + 1 / 2^2)
    from metadp.amplification.one_pass import gaussian_epsilon

    charged = gaussian_epsilon((1 / 1.3 ** 2 + 2 / 4) ** -0.5, DELTA)
    assert bounds.epsilon_upper == pytest.approx(charged, rel=1e-3)
    assert bounds.epsilon_upper > gaussian_epsilon((1 / 1.3 ** 2 + 1 / 4) ** -0.5, DELTA) * 1.05


def test_the_with_replacement_example_is_the_plan_account_loader_writes():
    from pathlib import Path

    from metadp.plan import load_plan

    example = load_plan(Path(__file__).resolve().parents[2] / "examples" / "dp_sgd_loader_with_replacement.toml")
    loader = DataLoader(_data(720), batch_size=30, sampler=WeightedRandomSampler(torch.ones(720), 720))
    account = account_loader(loader, noise_multiplier=Z, epochs=2, delta=DELTA)
    assert (account.plan.sampling, account.plan.steps, account.plan.noise) == (example.sampling, example.steps,
                                                                                example.noise)
    assert account.epsilon == plan_epsilon(example).epsilon


@pytest.mark.slow
def test_opacus_data_parallel_over_distributed_sampler_shards_reports_the_shuffle_plan(tmp_path):
    """Two processes (gloo), Opacus's DPDDP and DistributedDPOptimizer (noise added once, on rank 0, then the
    all-reduced sum), each rank's loader a DistributedSampler shard of 360 records in batches of 15: the run
    releases 48 sums of 30 records cut from shuffled passes, which is the plan `shuffle`, 720 records, batches of
    30, 48 steps (opacus_ddp_case.py; about 7 s)."""
    pytest.importorskip("opacus")
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("opacus_ddp_case.py")
    subprocess.run([sys.executable, str(script), str(tmp_path), "2"], check=True, timeout=300, capture_output=True)
    found = json.loads((tmp_path / "result.json").read_text())
    expected = _hand("shuffle", 720, 48, batch_size=30)
    assert found["steps"] == 48 and found["same_model_on_every_rank"]
    assert found["scheme"] == "shuffle" and found["loader"]["batch_size"] == 30
    assert found["epsilon"] == pytest.approx(expected.epsilon, rel=1e-9)
    assert found["lower"] == pytest.approx(expected.epsilon_lower, rel=1e-9)
