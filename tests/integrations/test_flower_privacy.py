"""metadp inside Flower's own DP (metadp.integrations.flower): the PrivacyAccountant protocol backed by metadp,
and the client selection that lets Flower's fixed-clipping wrapper claim amplification.

What must hold: the accountant's epsilon equals `metadp plan` of the equivalent plan (Poisson, fixed-size under
substitution, no sampling); the fixed-size replace-one case charges 2C (above the C that Flower's own RDP backend
charges, which is below the true epsilon of the 2C mechanism); the no-amplification case is never above Flower's
RDP number and equals the Gaussian's closed form; state round-trips; the pairs without a theorem are refused.
The ClientSelection round arithmetic is checked in process against its formula; a slow test runs it inside a
real Flower simulation.
"""

import math

import numpy as np
import pytest
from scipy.stats import norm

flwr = pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp import GaussianPrivacyEvent, NeighboringRelation, PrivacyConfig, SamplingMethod  # noqa: E402
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg  # noqa: E402
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant as FlowerRdp  # noqa: E402

from metadp.integrations.flower import ClientSelection, MetadpPrivacyAccountant  # noqa: E402
from metadp.plan import loads_plan, plan_epsilon  # noqa: E402

PLAN = """\
name = "Flower clients"
unit = "task"
delta = {delta}
steps = {steps}

[sampling]
scheme = "{scheme}"
population = {population}
{batch}

[noise]
mechanism = "gaussian"
multiplier = {z}
"""


def _plan_eps(scheme, population, m, z, steps, delta=1e-5):
    batch = "" if scheme == "none" else f"batch_size = {m}"
    plan = loads_plan(PLAN.format(delta=delta, steps=steps, scheme=scheme, population=population, batch=batch, z=z))
    return plan_epsilon(plan).epsilon


def _accountant(method, relation, population, z, m, rounds, delta=1e-5, one_by_one=True):
    acc = MetadpPrivacyAccountant(PrivacyConfig(delta, population, relation, method))
    event = GaussianPrivacyEvent(z, m, population)
    if one_by_one:
        for _ in range(rounds):
            acc.compose(event)
    else:
        acc.compose(event, rounds)
    return acc


@pytest.mark.parametrize("population, m, z, rounds", [(100, 10, 1.1, 50), (20, 5, 0.9, 3), (1000, 1, 2.0, 400)])
def test_poisson_selection_equals_metadp_plan(population, m, z, rounds):
    acc = _accountant("poisson", "add-or-remove-one", population, z, m, rounds)
    assert acc.num_releases == rounds
    assert acc.get_epsilon(1e-5) == pytest.approx(_plan_eps("poisson", population, m, z, rounds), rel=1e-9)
    spent = acc.get_privacy_spent()
    assert spent.epsilon == acc.get_epsilon(1e-5) and spent.delta == 1e-5 and spent.num_releases == rounds


def test_fixed_size_replace_one_charges_2c_where_flowers_backend_charges_c():
    population, m, z, rounds = 100, 10, 1.1, 50
    ours = _accountant("without-replacement", "replace-one", population, z, m, rounds).get_epsilon(1e-5)
    assert ours == pytest.approx(_plan_eps("fixed", population, m, z, rounds), rel=1e-9)
    flower = FlowerRdp(PrivacyConfig(1e-5, population, NeighboringRelation.REPLACE_ONE, SamplingMethod.WITHOUT_REPLACEMENT))
    flower.compose(GaussianPrivacyEvent(z, m, population), rounds)
    # Flower's backend: sensitivity C (the multiplier unchanged); the same mechanism at 2C is the multiplier z/2
    flower_at_2c = FlowerRdp(PrivacyConfig(1e-5, population, NeighboringRelation.REPLACE_ONE, SamplingMethod.WITHOUT_REPLACEMENT))
    flower_at_2c.compose(GaussianPrivacyEvent(z / 2, m, population), rounds)
    assert flower.get_epsilon(1e-5) < ours <= flower_at_2c.get_epsilon(1e-5) * (1 + 1e-9)


def test_no_amplification_is_the_gaussian_and_never_above_flowers_rdp():
    population, z, rounds = 50, 3.0, 10
    acc = _accountant("no-amplification", "add-or-remove-one", population, z, 7, rounds, one_by_one=False)
    ours = acc.get_epsilon(1e-5)
    flower = FlowerRdp(PrivacyConfig(1e-5, population, NeighboringRelation.ADD_OR_REMOVE_ONE,
                                     SamplingMethod.NO_AMPLIFICATION))
    flower.compose(GaussianPrivacyEvent(z, 7, population), rounds)
    assert ours <= flower.get_epsilon(1e-5)
    mu = math.sqrt(rounds) / z  # T Gaussians of multiplier z: mu-GDP; delta(eps) in closed form (Balle & Wang)
    closed = norm.cdf(-ours / mu + mu / 2) - math.exp(ours) * norm.cdf(-ours / mu - mu / 2)
    assert closed <= 1e-5 and closed == pytest.approx(1e-5, rel=2e-2)
    assert ours == pytest.approx(_plan_eps("none", population, 1, z, rounds), rel=1e-9)


def test_get_delta_is_a_certified_upper_bound_near_the_truth():
    acc = _accountant("poisson", "add-or-remove-one", 100, 1.0, 10, 30)
    eps = acc.get_epsilon(1e-6)  # an upper bound at 1e-6: the true delta at eps is at most 1e-6
    assert acc.get_delta(eps) == pytest.approx(1e-6, rel=0.05)
    # without sampling, T Gaussians are mu-GDP: delta(eps) has a closed form; the bound is above it, and close
    gauss = _accountant("no-amplification", "add-or-remove-one", 50, 3.0, 7, 10)
    mu = math.sqrt(10) / 3.0
    for eps in (0.5, 1.0, 2.0):
        exact = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        assert exact <= gauss.get_delta(eps) <= exact * (1 + 1e-6)


def test_would_exceed_state_round_trip_and_refusals():
    acc = _accountant("poisson", "add-or-remove-one", 100, 1.0, 10, 30)
    event = GaussianPrivacyEvent(1.0, 10, 100)
    eps = acc.get_epsilon(1e-5)
    assert acc.would_exceed(event, max_epsilon=eps) and not acc.would_exceed(event, max_epsilon=eps + 1)
    assert acc.num_releases == 30  # would_exceed composes nothing
    other = MetadpPrivacyAccountant(PrivacyConfig(1e-3, 5, "add-or-remove-one", "no-amplification"))
    other.load_state_dict(acc.state_dict())
    assert other.get_epsilon(1e-5) == eps and other.config.population_size == 100
    with pytest.raises(ValueError, match="population_size"):
        acc.compose(GaussianPrivacyEvent(1.0, 10, 99))
    with pytest.raises(ValueError, match="count"):
        acc.compose(event, 0)
    with pytest.raises(ValueError, match="max_epsilon"):
        acc.would_exceed(event)
    with pytest.raises(ValueError, match="no theorem here"):
        _unsupported_pair()


def _unsupported_pair():
    config = PrivacyConfig(1e-5, 10, "add-or-remove-one", "poisson")
    object.__setattr__(config, "neighboring_relation", flwr.serverapp.NeighboringRelation.REPLACE_ONE)
    MetadpPrivacyAccountant(config)


# -- ClientSelection, in process ------------------------------------------------------------------------
class Grid:
    def __init__(self, nodes):
        self.nodes = nodes

    def get_node_ids(self):
        return list(self.nodes)


def _arrays(value):
    return ArrayRecord({"w": Array(np.asarray(value, dtype=np.float64))})


def _reply(message, value, weight=7):
    return Message(RecordDict({"arrays": _arrays(value), "metrics": MetricRecord({"num-examples": weight})}),
                   reply_to=message)


@pytest.fixture
def identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_task_id", 1), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, getattr(TaskIdentity, name) or value)


def _selection(scheme="poisson", clients=2, population=6, z=1e-9, clip=1.0, seed=0, accountant=None):
    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=1.0, min_available_nodes=population), z, clip,
                                                    clients)
    return ClientSelection(dp, clients=clients, population=population, scheme=scheme, seed=seed,
                           accountant=accountant)


def test_a_round_releases_the_clipped_sum_over_m_and_drops_garbage(identity):
    selection = _selection("fixed", clients=3, population=6)
    current = np.zeros(4)
    messages = list(selection.configure_train(1, _arrays(current), ConfigRecord(), Grid(range(1, 7))))
    assert len(messages) == 3 and len({m.metadata.dst_node_id for m in messages}) == 3
    updates = [np.array([3.0, 4.0, 0, 0]), np.array([0.1, 0, 0, 0]), np.array([np.nan, 0, 0, 0])]
    replies = [_reply(m, u, weight=w) for m, u, w in zip(messages, updates, (1, 50, 9))]
    arrays, _ = selection.aggregate_train(1, replies)
    # clipped to C = 1: (0.6, 0.8) and (0.1, 0); the NaN reply is a zero update; divided by m = 3, not by 2
    np.testing.assert_allclose(arrays["w"].numpy(), np.array([0.7, 0.8, 0, 0]) / 3, atol=1e-6)
    assert selection.rounds == [{"selected": 3, "dropped": 1}]


def test_poisson_selection_draws_each_client_independently(identity):
    selection = _selection("poisson", clients=2, population=6, z=1.0, seed=3)
    sizes = []
    for r in range(1, 2001):
        sizes.append(len(list(selection.configure_train(r, _arrays(np.zeros(2)), ConfigRecord(), Grid(range(6))))))
    # Binomial(6, 1/3): mean 2, P(0) = (2/3)^6
    assert np.mean(sizes) == pytest.approx(2.0, abs=0.1)
    assert np.mean(np.array(sizes) == 0) == pytest.approx((2 / 3) ** 6, abs=0.03)


@pytest.mark.parametrize("answered", [3, 1, 0])
def test_a_rounds_noise_is_zc_over_m_however_many_clients_answered(identity, answered):
    """The release is (sum + N(0, (zC)^2)) / m: on 20,000 coordinates whose clipped updates are 0, the output's
    standard deviation is zC/m = 2/3, whether 3, 1 or 0 of the 3 selected clients answered (the others send
    NaN or nothing): the wrapper's own std zC/answered, rescaled by answered/m, or the noise alone."""
    np.random.seed(1)  # Flower's wrapper draws its noise from numpy's global generator
    selection = _selection("fixed", clients=3, population=6, z=2.0, clip=1.0, seed=4)
    current = np.zeros(20_000)
    messages = list(selection.configure_train(1, _arrays(current), ConfigRecord(), Grid(range(1, 7))))
    replies = [_reply(m, current if j < answered else np.full_like(current, np.nan))
               for j, m in enumerate(messages)] if answered else []
    arrays, _ = selection.aggregate_train(1, replies)
    out = arrays["w"].numpy()
    assert out.std() == pytest.approx(2.0 / 3.0, rel=0.02) and abs(out.mean()) < 0.02
    assert selection.rounds[-1]["dropped"] == (3 - answered if answered else 3)


def test_client_selection_refuses_what_breaks_its_accounting():
    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=0.5), 1.0, 1.0, 2)
    with pytest.raises(ValueError, match="fraction_train=1.0"):
        ClientSelection(dp, clients=2, population=6)
    with pytest.raises(ValueError, match="not this selection's"):
        _selection("fixed", accountant=MetadpPrivacyAccountant(PrivacyConfig(1e-5, 6, "add-or-remove-one", "poisson")))
    with pytest.raises(ValueError, match="fixed-clipping"):
        ClientSelection(FedAvg(fraction_train=1.0), clients=2, population=6)


# -- inside a real Flower simulation -----------------------------------------------------------------------
@pytest.mark.slow
def test_flowers_wrapper_with_metadp_selection_reports_metadp_plans_epsilon_in_a_simulation(tmp_path):
    import json
    from pathlib import Path

    from metadp.training.engines.flower_launch import Federation, app_folder

    out = tmp_path / "found.json"
    app = Path(__file__).with_name("flower_dp_app")
    with Federation(tmp_path / "work", "simulation", clients=6) as federation:
        code, log = federation.run(app_folder(tmp_path / "work", app), {"out": str(out)}, timeout=300)
    assert code == 0 and out.exists(), log.read_text()[-3000:]
    found = json.loads(out.read_text())
    poisson, fixed = found["poisson"], found["fixed"]
    assert poisson["releases"] == 3 and fixed["releases"] == 3
    assert poisson["final_finite"] and fixed["final_finite"]
    assert [r["selected"] for r in fixed["rounds"]] == [2, 2, 2]
    assert all(r["dropped"] == 0 for r in poisson["rounds"] + fixed["rounds"])
    assert poisson["epsilon"] == pytest.approx(_plan_eps("poisson", 6, 2, 1.0, 3), rel=1e-9)
    assert fixed["epsilon"] == pytest.approx(_plan_eps("fixed", 6, 2, 1.0, 3), rel=1e-9)


# -- k-of-t random allocation of clients (balls in bins) -----------------------------------------------------
def _allocated(selected=2, clients=2, population=6, seed=5, z=1.0):
    t = selected * population // clients
    config = PrivacyConfig(1e-5, population, "add-or-remove-one", "no-amplification")
    accountant = MetadpPrivacyAccountant(config, allocation=(t, selected))
    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=1.0, min_available_nodes=population), z, 1.0,
                                                    clients)
    return ClientSelection(dp, clients=clients, population=population, scheme="balls_in_bins", selected=selected,
                           seed=seed, accountant=accountant)


def test_balls_in_bins_puts_each_client_in_exactly_k_rounds_of_each_pass(identity):
    selection = _allocated(selected=2, clients=2, population=6)  # t = 6 rounds a pass
    assert selection.pass_rounds == 6
    passes = []
    for p in range(200):
        counts = np.zeros(6, dtype=int)
        for r in range(6):
            messages = selection.configure_train(6 * p + r + 1, _arrays(np.zeros(2)), ConfigRecord(), Grid(range(6)))
            for m in messages:
                counts[m.metadata.dst_node_id] += 1
        passes.append(counts)
    assert (np.array(passes) == 2).all()  # every client in exactly k = 2 rounds of every pass
    sizes = [r["selected"] for r in selection.rounds]
    assert np.mean(sizes) == pytest.approx(2.0)  # m = k N / t exactly, on average over whole passes
    assert len(set(sizes)) > 1  # ... but a round's size varies: the rounds are not fixed-size batches


def test_balls_in_bins_accountant_reports_metadp_plans_epsilon(identity):
    selection = _allocated(selected=2, clients=2, population=6, z=1.5)
    for r in range(1, 10):  # a pass and a half: the partial pass charged in full, as plans charge it
        messages = list(selection.configure_train(r, _arrays(np.zeros(2)), ConfigRecord(), Grid(range(6))))
        selection.aggregate_train(r, [_reply(m, np.array([0.1, 0.0])) for m in messages])
    assert selection.accountant.num_releases == 9
    plan = plan_epsilon(loads_plan('name = "k of t"\nunit = "task"\ndelta = 1e-5\nsteps = 9\n[sampling]\n'
                                   'scheme = "balls_in_bins"\npopulation = 6\nbatch_size = 2\nselected = 2\n'
                                   '[noise]\nmechanism = "gaussian"\nmultiplier = 1.5\n'))
    assert selection.accountant.get_epsilon(1e-5) == pytest.approx(plan.epsilon, rel=1e-9)
    again = MetadpPrivacyAccountant(PrivacyConfig(1e-5, 6, "add-or-remove-one", "no-amplification"))
    again.load_state_dict(selection.accountant.state_dict())
    assert again.allocation == (6, 2) and again.get_epsilon(1e-5) == selection.accountant.get_epsilon(1e-5)
    assert selection.accountant.get_delta(plan.epsilon * 1.01) <= 1e-5


def test_balls_in_bins_refuses_what_its_accounting_does_not_cover():
    with pytest.raises(ValueError, match="clients dividing selected x population"):
        _allocated(selected=1, clients=4, population=6)
    with pytest.raises(ValueError, match="selected applies only to scheme = 'balls_in_bins'"):
        ClientSelection(DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=1.0), 1.0, 1.0, 2), clients=2,
                        population=6, selected=2)
    with pytest.raises(ValueError, match="allocation None is not this selection's"):
        dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=1.0), 1.0, 1.0, 2)
        ClientSelection(dp, clients=2, population=6, scheme="balls_in_bins", selected=2,
                        accountant=MetadpPrivacyAccountant(PrivacyConfig(1e-5, 6, "add-or-remove-one",
                                                                         "no-amplification")))
    with pytest.raises(ValueError, match="no-amplification with add-or-remove-one"):
        MetadpPrivacyAccountant(PrivacyConfig(1e-5, 6, "add-or-remove-one", "poisson"), allocation=(6, 2))
    with pytest.raises(ValueError, match="1 <= k <= t"):
        MetadpPrivacyAccountant(PrivacyConfig(1e-5, 6, "add-or-remove-one", "no-amplification"), allocation=(2, 3))
    acc = MetadpPrivacyAccountant(PrivacyConfig(1e-5, 6, "add-or-remove-one", "no-amplification"), allocation=(6, 2))
    acc.compose(GaussianPrivacyEvent(1.0, 2, 6))
    acc.compose(GaussianPrivacyEvent(2.0, 2, 6))
    with pytest.raises(ValueError, match="share one noise multiplier"):
        acc.get_epsilon(1e-5)
