"""The DataLoader check (metadp.integrations.sampling_check) on real torch and Opacus 1.6 objects."""

from __future__ import annotations

import math
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")
from opacus import PrivacyEngine  # noqa: E402
from opacus.data_loader import DPDataLoader  # noqa: E402
from opacus.utils.uniform_sampler import UniformWithReplacementSampler  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, RandomSampler, TensorDataset, WeightedRandomSampler  # noqa: E402

from metadp.integrations.opacus import (PoissonAssumptionWarning, describe_sampling,  # noqa: E402
                                        make_private_checked, require_poisson)

pytestmark = pytest.mark.filterwarnings("ignore:Secure RNG turned off")

N = 256


@pytest.fixture
def data():
    torch.manual_seed(0)
    return TensorDataset(torch.randn(N, 4), torch.randint(0, 2, (N,)))


def model_and_optimizer():
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_opacus_poisson_loader_is_accepted(data):
    engine = PrivacyEngine(accountant="metadp")
    model, optimizer = model_and_optimizer()
    *_, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=DataLoader(data, batch_size=32),
                                     noise_multiplier=1.0, max_grad_norm=1.0)
    found = require_poisson(loader)
    assert (found.kind, found.ok, found.sampler) == ("poisson", True, "UniformWithReplacementSampler")
    assert found.sample_rate == found.accounted_rate == 1 / 8


def test_poisson_sampling_false_leaves_a_shuffled_loader_that_is_flagged(data):
    engine = PrivacyEngine(accountant="metadp")
    model, optimizer = model_and_optimizer()
    *_, loader = engine.make_private(module=model, optimizer=optimizer, noise_multiplier=1.0, max_grad_norm=1.0,
                                     data_loader=DataLoader(data, batch_size=32, shuffle=True), poisson_sampling=False)
    found = describe_sampling(loader)
    assert (found.kind, found.ok, found.batch_size, found.sample_rate) == ("shuffled", False, 32, 32 / N)
    assert "Chua et al. 2024" in found.meaning and "scheme = 'shuffle'" in found.meaning
    with pytest.raises(ValueError, match=r"data_loader \(shuffled, RandomSampler\)"):
        require_poisson(loader)
    with pytest.warns(PoissonAssumptionWarning, match="does not apply"):
        require_poisson(loader, action="warn")


def test_weighted_random_sampler_is_flagged_with_its_exposure(data):
    weights = torch.ones(N)
    weights[0] = 50.0  # one record far more likely than the rest
    loader = DataLoader(data, batch_size=16, sampler=WeightedRandomSampler(weights, num_samples=128))
    found = describe_sampling(loader)
    p = 50.0 / (N - 1 + 50.0)
    assert (found.kind, found.ok) == ("weighted", False)
    assert found.sample_rate == pytest.approx(1 - (1 - p) ** 16, rel=1e-9)  # 16 draws with replacement
    assert found.sample_rate > found.accounted_rate  # the accountant charges 1/len(loader) = 1/8 per step
    assert "Opacus issue #813" in found.meaning
    with pytest.raises(ValueError, match="weighted"):
        require_poisson(loader)


@pytest.mark.parametrize("loader, kind", [
    (lambda d: DataLoader(d, batch_size=32), "sequential"),
    (lambda d: DataLoader(d, batch_size=32, sampler=RandomSampler(d, replacement=True)), "with_replacement"),
    (lambda d: DataLoader(d, batch_size=32, sampler=WeightedRandomSampler(torch.ones(N), N)), "with_replacement"),
    (lambda d: DataLoader(d, batch_size=None), "unknown"),
])
def test_other_loaders_are_flagged(data, loader, kind):
    found = describe_sampling(loader(data))
    assert (found.kind, found.ok) == (kind, False)
    if kind == "with_replacement":  # what it does comes from read_loader, the one reader; the plan that covers it
        assert "moves the sum by up to 2C" in found.meaning and "scheme = 'with_replacement'" in found.meaning
        assert found.sample_rate == pytest.approx(1 - (1 - 1 / N) ** 32, rel=1e-12)


def test_a_poisson_sampler_charged_below_its_rate_is_flagged(data):
    sampler = UniformWithReplacementSampler(num_samples=N, sample_rate=0.1, steps=20)  # 20 batches, 1/len = 0.05
    found = describe_sampling(DataLoader(data, batch_sampler=sampler))
    assert (found.kind, found.ok, found.sample_rate, found.accounted_rate) == ("poisson", False, 0.1, 0.05)
    assert "BELOW the sampler's rate" in found.meaning
    exact = describe_sampling(DPDataLoader(data, sample_rate=0.3))  # len = int(1 / 0.3) = 3: charged 1/3 >= 0.3
    assert exact.ok and math.isclose(exact.accounted_rate, 1 / 3)



def test_a_poisson_sampler_without_a_length_is_described_not_a_crash(data):
    """A Poisson batch sampler with no ``__len__`` (a user's subclass): Opacus charges 1/len(loader), which
    has no value, so the description says the charged rate is unknown and does not call it covered."""

    class Endless(UniformWithReplacementSampler):
        def __len__(self):
            raise TypeError("no length")

    found = describe_sampling(DataLoader(data, batch_sampler=Endless(num_samples=N, sample_rate=0.1, steps=20)))
    assert (found.kind, found.ok, found.sample_rate, found.accounted_rate) == ("poisson", False, 0.1, None)
    assert "probability 0.1" in found.meaning and "no length" in found.meaning

@pytest.mark.parametrize("accountant, sampler, words", [
    # Opacus's own accountant charges the Poisson number: a shuffled loader is refused
    ("rdp", None, "shuffled"),
    # metadp's accounts what the loader does (tests/integrations/test_loader_accounting.py): only a loader no plan
    # describes is refused
    ("metadp", "weighted", "WeightedRandomSampler with non-uniform weights"),
])
def test_make_private_checked_refuses_before_changing_anything(data, accountant, sampler, words):
    engine = PrivacyEngine(accountant=accountant)
    model, optimizer = model_and_optimizer()
    loader = (DataLoader(data, batch_size=32, shuffle=True) if sampler is None else
              DataLoader(data, batch_size=32, sampler=WeightedRandomSampler(torch.linspace(1, 2, N), N)))
    with pytest.raises(ValueError, match=words):
        make_private_checked(engine, module=model, optimizer=optimizer, noise_multiplier=1.0, max_grad_norm=1.0,
                             data_loader=loader, poisson_sampling=False)
    assert engine.dataset is None and len(engine.accountant) == 0  # make_private never ran


def test_make_private_checked_warns_when_opacus_drops_the_weights(data):
    engine = PrivacyEngine(accountant="metadp")
    model, optimizer = model_and_optimizer()
    loader = DataLoader(data, batch_size=16, sampler=WeightedRandomSampler(torch.ones(N), num_samples=128))
    with pytest.warns(PoissonAssumptionWarning, match="weights are dropped.*|expected batch 32 records"):
        *_, out = make_private_checked(engine, module=model, optimizer=optimizer, noise_multiplier=1.0,
                                       max_grad_norm=1.0, data_loader=loader)
    assert describe_sampling(out).ok


def test_make_private_checked_is_quiet_for_an_ordinary_loader(data):
    engine = PrivacyEngine(accountant="metadp")
    model, optimizer = model_and_optimizer()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PoissonAssumptionWarning)
        *_, out = make_private_checked(engine, module=model, optimizer=optimizer, noise_multiplier=1.0,
                                       max_grad_norm=1.0, data_loader=DataLoader(data, batch_size=32, shuffle=True))
    assert describe_sampling(out).kind == "poisson"


def test_not_a_data_loader_is_refused():
    with pytest.raises(ValueError, match="must be a torch.utils.data.DataLoader"):
        describe_sampling([1, 2, 3])
