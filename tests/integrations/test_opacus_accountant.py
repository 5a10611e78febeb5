"""metadp as an Opacus accountant (``PrivacyEngine(accountant="metadp")``), with real Opacus 1.6 objects.

Tolerance against Opacus's own ``prv`` accountant: its ``compute_epsilon`` returns (lower, estimate,
upper) with the estimate within ``eps_error`` (0.01 here) of the true epsilon and the lower bound below
it (Gopi et al. 2021). metadp's PLD upper bound is at least the true epsilon and at most 0.5% above its
own certified lower bound. So metadp >= prv's lower bound, and metadp - estimate lies in
[-0.01, 0.01 + 0.005 x metadp].
"""

from __future__ import annotations

import math

import pytest

from metadp.accounting import Gaussian, PoissonSampled, SelfComposed
from metadp.accounting.pld import PldAccountant

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")
from opacus import PrivacyEngine  # noqa: E402
from opacus.accountants import PRVAccountant, create_accountant  # noqa: E402
from opacus.accountants import registry  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from metadp.integrations import opacus as mo  # noqa: E402  (registers "metadp")

DELTA = 1e-5


def pld_epsilon(z, q, steps, delta=DELTA):
    return PldAccountant(max_seconds=math.inf).compose(SelfComposed(PoissonSampled(q, Gaussian(z)), steps)) \
        .get_epsilon(delta)


@pytest.fixture
def setup():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(data, batch_size=32)


def train(model, optimizer, loader, epochs=1):
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


@pytest.mark.filterwarnings("ignore::UserWarning")  # Opacus: secure RNG off; torch: full backward hook
def test_training_with_privacy_engine_gives_metadp_pld_bound(setup):
    model, optimizer, loader = setup
    engine = PrivacyEngine(accountant="metadp")
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                   noise_multiplier=1.0, max_grad_norm=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    train(model, optimizer, loader)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert isinstance(engine.accountant, mo.MetadpAccountant)
    (z, q, steps), = engine.accountant.history  # one entry: Opacus merges equal steps
    assert (z, q) == (1.0, 1 / 8) and steps >= 1
    epsilon = engine.get_epsilon(DELTA)
    assert epsilon == pld_epsilon(1.0, 1 / 8, steps)
    interval = engine.accountant.get_epsilon_bounds(DELTA)
    assert interval.epsilon_lower <= epsilon == interval.epsilon_upper
    prv = PRVAccountant()
    prv.history = list(engine.accountant.history)
    dprv = prv._get_dprv(eps_error=0.01, delta_error=DELTA / 1000)  # what PRVAccountant.get_epsilon builds
    lower, estimate, _ = dprv.compute_epsilon(DELTA, DELTA / 1000, 0.01)
    assert epsilon >= lower
    assert -0.01 <= epsilon - estimate <= 0.01 + 0.005 * epsilon


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_make_private_with_epsilon_meets_its_target(setup):
    model, optimizer, loader = setup
    engine = PrivacyEngine(accountant="metadp")
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader, target_epsilon=2.0, target_delta=DELTA, epochs=2,
        max_grad_norm=1.0)
    planned = pld_epsilon(optimizer.noise_multiplier, 1 / 8, 16)  # int(epochs / sample_rate) steps
    assert 2.0 - 0.01 <= planned <= 2.0  # Opacus bisects until the target is met within 0.01
    # Poisson batches: the number of steps per epoch is len(loader) = 8 (batches may be empty, never skipped)
    train(model, optimizer, loader, epochs=2)
    assert engine.accountant.history == [(optimizer.noise_multiplier, 1 / 8, 16)]
    assert engine.get_epsilon(DELTA) == planned


def test_noise_multiplier_for_epsilon_is_the_smallest_that_meets_the_target():
    z = mo.noise_multiplier_for_epsilon(target_epsilon=2.0, target_delta=DELTA, sample_rate=1 / 8, epochs=2)
    assert pld_epsilon(z, 1 / 8, 16) <= 2.0 < pld_epsilon(z * (1 - 1e-3), 1 / 8, 16)
    with pytest.raises(ValueError, match="exactly one of steps and epochs"):
        mo.noise_multiplier_for_epsilon(target_epsilon=2.0, target_delta=DELTA, sample_rate=0.1)


def test_state_dict_round_trips_and_is_checked():
    acc = create_accountant("metadp")
    for _ in range(30):
        acc.step(noise_multiplier=1.2, sample_rate=0.02)
    acc.step(noise_multiplier=0.9, sample_rate=0.02)
    state = acc.state_dict()
    assert state["mechanism"] == "metadp" and state["history"] == [(1.2, 0.02, 30), (0.9, 0.02, 1)]
    again = mo.MetadpAccountant()
    again.load_state_dict(state)
    assert again.history == acc.history and again.get_epsilon(DELTA) == acc.get_epsilon(DELTA)
    with pytest.raises(ValueError, match="rdp cannot be loaded"):
        again.load_state_dict({"history": [], "mechanism": "rdp"})
    with pytest.raises(ValueError, match=r"state_dict history\[1\]: sample_rate must be in \[0, 1\]"):
        again.load_state_dict({"history": [(1.0, 0.1, 2), (1.0, 1.5, 2)], "mechanism": "metadp"})
    assert again.history == acc.history  # unchanged by the refused load


@pytest.mark.parametrize("history, message", [
    ([(0.0, 0.1, 5)], r"history\[0\]: noise_multiplier must be finite and > 0"),
    ([(1.0, 0.1, 5), (-1.0, 0.1, 5)], r"history\[1\]: noise_multiplier must be finite and > 0"),
    ([(1.0, 1.5, 5)], r"history\[0\]: sample_rate must be in \[0, 1\]"),
    ([(1.0, -0.1, 5)], r"sample_rate must be in \[0, 1\]"),
    ([(math.nan, 0.1, 5)], "noise_multiplier must be a real number"),
    ([(1.0, 0.1, 2.5)], "num_steps must be an integer >= 0"),
    ([(1.0, 0.1)], r"history\[0\] must be \(noise_multiplier, sample_rate, num_steps\)"),
])
def test_unsupported_history_is_a_clear_value_error(history, message):
    acc = mo.MetadpAccountant()
    acc.history = history
    with pytest.raises(ValueError, match=message):
        acc.get_epsilon(DELTA)


def test_step_refuses_bad_values_before_recording():
    acc = mo.MetadpAccountant()
    with pytest.raises(ValueError, match="step: noise_multiplier must be finite and > 0"):
        acc.step(noise_multiplier=0.0, sample_rate=0.1)
    with pytest.raises(ValueError, match="step: sample_rate must be in"):
        acc.step(noise_multiplier=1.0, sample_rate=1.01)
    assert acc.history == [] and acc.get_epsilon(DELTA) == 0.0 and len(acc) == 0


def test_results_follow_the_history_not_a_stale_cache():
    acc = mo.MetadpAccountant()
    acc.history = [(1.0, 0.05, 50)]  # as Opacus's get_noise_multiplier sets it
    one = acc.get_epsilon(DELTA)
    acc.step(noise_multiplier=1.0, sample_rate=0.05)
    two = acc.get_epsilon(DELTA)
    assert acc.history == [(1.0, 0.05, 51)]
    assert one == pld_epsilon(1.0, 0.05, 50) and two == pld_epsilon(1.0, 0.05, 51) and two > one
    acc.history = [(1.0, 0.05, 50)]
    assert acc.get_epsilon(DELTA) == one
    assert acc.get_epsilon(DELTA, eps_error=0.1, alphas=[2, 3]) == one  # Opacus forwards kwargs: ignored


def test_registration_is_idempotent_and_never_overwrites_another_accountant(monkeypatch):
    mo._register()  # again: no error
    assert type(create_accountant("metadp")) is mo.MetadpAccountant

    class Other(opacus.accountants.RDPAccountant):
        pass

    monkeypatch.setitem(registry._ACCOUNTANTS, "metadp", Other)
    with pytest.raises(ValueError, match="already has an accountant named 'metadp'"):
        mo._register()
