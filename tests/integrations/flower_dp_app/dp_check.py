"""Flower's DifferentialPrivacyServerSideFixedClipping around FedAvg, with metadp's ClientSelection and
MetadpPrivacyAccountant: the three-line change of metadp.integrations.flower, in a real Flower run. The server
runs the Poisson selection, then the fixed-size one, and writes what each accountant says to the run config's
`out` (JSON); each client returns the model plus a step of norm 3 (clipped to 1 by the wrapper)."""

import json

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import PrivacyConfig, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

from metadp.integrations.flower import ClientSelection, MetadpPrivacyAccountant

server = ServerApp()
client = ClientApp()


@client.train()
def train(message, context):
    arrays = message.content["arrays"].to_numpy_ndarrays()
    step = np.zeros_like(arrays[0])
    step.flat[int(context.node_config["partition-id"]) % step.size] = 3.0
    return Message(RecordDict({"arrays": ArrayRecord([arrays[0] + step]),
                               "metrics": MetricRecord({"num-examples": 10})}), reply_to=message)


@server.main()
def main(grid, context):
    c = context.run_config
    n, m, rounds, z = int(c["population"]), int(c["clients"]), int(c["rounds"]), float(c["noise"])
    found = {}
    for scheme, config in (("poisson", PrivacyConfig(1e-5, n, "add-or-remove-one", "poisson")),
                           ("fixed", PrivacyConfig(1e-5, n, "replace-one", "without-replacement"))):
        accountant = MetadpPrivacyAccountant(config)
        dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=1.0, min_available_nodes=n), z, 1.0, m)
        strategy = ClientSelection(dp, clients=m, population=n, scheme=scheme, accountant=accountant)
        result = strategy.start(grid, ArrayRecord([np.zeros(8)]), num_rounds=rounds)
        final = result.arrays.to_numpy_ndarrays()[0]
        spent = accountant.get_privacy_spent()
        found[scheme] = {"epsilon": spent.epsilon, "releases": spent.num_releases, "rounds": strategy.rounds,
                         "final_finite": bool(np.isfinite(final).all())}
    with open(c["out"], "w") as f:
        json.dump(found, f)
