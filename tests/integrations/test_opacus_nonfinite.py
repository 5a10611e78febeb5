"""Non-finite and non-positive numbers stop at metadp's boundary with Opacus, each named (issue 28, class 5).

Opacus's noise search compares ``eps > target_epsilon``: for target_epsilon = nan (or inf) both loops are
skipped and it returns its first multiplier, 10, without asking any accountant. metadp cannot change Opacus's
search, so it refuses these numbers wherever they pass through it: ``make_private_checked``,
``noise_multiplier_for_epsilon`` and the accountant's own methods."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")
from opacus import PrivacyEngine  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from metadp.integrations import opacus as mo  # noqa: E402  (registers "metadp")

BAD = [math.nan, math.inf, -math.inf, 0.0, -1.0]
pytestmark = pytest.mark.filterwarnings("ignore:Secure RNG turned off")


@pytest.fixture
def setup():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(data, batch_size=16)


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("name", ["target_epsilon", "target_delta", "epochs", "max_grad_norm"])
def test_make_private_checked_with_epsilon_refuses_and_names(setup, name, value):
    model, optimizer, loader = setup
    kwargs = dict(target_epsilon=1.0, target_delta=1e-5, epochs=1, max_grad_norm=1.0)
    kwargs[name] = value
    engine = PrivacyEngine(accountant="metadp")
    with pytest.raises(ValueError, match=name):
        mo.make_private_checked(engine, module=model, optimizer=optimizer, data_loader=loader, **kwargs)
    assert len(engine.accountant) == 0  # nothing was set up


@pytest.mark.parametrize("value", [1.0, 1.5])
def test_target_delta_of_one_or_more_is_refused(setup, value):
    model, optimizer, loader = setup
    with pytest.raises(ValueError, match="target_delta"):
        mo.make_private_checked(PrivacyEngine(accountant="metadp"), module=model, optimizer=optimizer, data_loader=loader,
                                target_epsilon=1.0, target_delta=value, epochs=1, max_grad_norm=1.0)


@pytest.mark.parametrize("value", BAD)
def test_make_private_checked_refuses_a_bad_noise_multiplier(setup, value):
    model, optimizer, loader = setup
    with pytest.raises(ValueError, match="noise_multiplier"):
        mo.make_private_checked(PrivacyEngine(accountant="metadp"), module=model, optimizer=optimizer,
                                data_loader=loader, noise_multiplier=value, max_grad_norm=1.0)


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("name", ["target_epsilon", "target_delta", "sample_rate", "epochs"])
def test_noise_multiplier_for_epsilon_refuses_and_names(name, value):
    kwargs = dict(target_epsilon=1.0, target_delta=1e-5, sample_rate=0.1, epochs=1.0)
    kwargs[name] = value
    if name == "sample_rate" and value == 0.0:
        kwargs["epochs"] = None
        kwargs["steps"] = 10  # rate 0 over 10 steps is a valid (empty) plan; with epochs it is refused
        with pytest.raises(ValueError):
            mo.noise_multiplier_for_epsilon(**kwargs)
        return
    with pytest.raises(ValueError, match=name):
        mo.noise_multiplier_for_epsilon(**kwargs)


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, -1.0])
def test_accountant_step_refuses_a_non_finite_or_non_positive_noise(value):
    accountant = mo.MetadpAccountant()
    with pytest.raises(ValueError, match="noise_multiplier"):
        accountant.step(noise_multiplier=value, sample_rate=0.1)
    assert len(accountant) == 0


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.1, 1.1])
def test_accountant_step_refuses_a_bad_sample_rate(value):
    with pytest.raises(ValueError, match="sample_rate"):
        mo.MetadpAccountant().step(noise_multiplier=1.0, sample_rate=value)


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, -1.0, 1.0])
def test_accountant_get_epsilon_refuses_a_bad_delta(value):
    accountant = mo.MetadpAccountant()
    accountant.step(noise_multiplier=1.0, sample_rate=0.1)
    with pytest.raises(ValueError, match="delta"):
        accountant.get_epsilon(value)


def test_opacus_search_through_metadp_never_sees_the_accountant_for_nan():
    # the neighbour's behaviour metadp guards against: Opacus alone returns 10 for a NaN target
    from opacus.accountants.utils import get_noise_multiplier
    assert get_noise_multiplier(target_epsilon=math.nan, target_delta=1e-5, sample_rate=0.1, epochs=1,
                                accountant="metadp") == 10


@pytest.mark.parametrize("field", ["noise_multiplier", "sample_rate"])
def test_an_integer_too_large_for_a_float_is_refused(field):
    values = {"noise_multiplier": 1.0, "sample_rate": 0.01, field: 10**400}
    with pytest.raises(ValueError, match=field):
        mo.MetadpAccountant().step(**values)
def _with_history(index, value):
    """The accountant as Opacus's noise search leaves it: ``history`` assigned, then ``get_epsilon`` asked."""
    accountant = mo.MetadpAccountant()
    entry = [1.0, 0.1, 10]
    entry[index] = value
    accountant.history = [tuple(entry)]
    return accountant.get_epsilon(1e-5)


def _stepped():
    accountant = mo.MetadpAccountant()
    accountant.step(noise_multiplier=1.0, sample_rate=0.1)
    return accountant


# every entry point of the integration that takes a number x {nan, inf, -inf, 0, negative}, where invalid
ENTRIES = [
    ("step", "noise_multiplier", lambda v: mo.MetadpAccountant().step(noise_multiplier=v, sample_rate=0.1), set()),
    ("step", "sample_rate", lambda v: mo.MetadpAccountant().step(noise_multiplier=1.0, sample_rate=v), {0.0}),
    ("get_epsilon", "delta", lambda v: _stepped().get_epsilon(v), set()),
    ("get_epsilon_bounds", "delta", lambda v: _stepped().get_epsilon_bounds(v), set()),
    ("history", "noise_multiplier", lambda v: _with_history(0, v), set()),
    ("history", "sample_rate", lambda v: _with_history(1, v), {0.0}),
    ("history", "num_steps", lambda v: _with_history(2, v), set()),  # 0.0 is a float, not a count
    ("load_state_dict", "noise_multiplier", lambda v: mo.MetadpAccountant().load_state_dict(
        {"history": [(v, 0.1, 1)], "mechanism": "metadp"}), set()),
    ("opacus get_noise_multiplier", "delta", lambda v: __import__("opacus.accountants.utils", fromlist=["x"])
     .get_noise_multiplier(target_epsilon=1.0, target_delta=v, sample_rate=0.1, steps=10, accountant="metadp"), set()),
    ("noise_multiplier_for_epsilon", "steps", lambda v: mo.noise_multiplier_for_epsilon(
        target_epsilon=1.0, target_delta=1e-5, sample_rate=0.1, steps=v), set()),
]


@pytest.mark.parametrize("call, name, value", [
    pytest.param(call, name, value, id=f"{where}-{name}-{value}") for where, name, call, valid in ENTRIES
    for value in BAD if value not in valid])
def test_every_entry_point_refuses_and_names(call, name, value):
    with pytest.raises(ValueError, match=name):
        call(value)


def test_the_accountant_has_no_get_privacy_spent():
    # Opacus's RDPAccountant has one (returning (epsilon, best order)); IAccountant does not, and metadp's
    # accountant offers get_epsilon and get_epsilon_bounds instead: no unchecked path hides behind that name
    assert not hasattr(mo.MetadpAccountant(), "get_privacy_spent")
