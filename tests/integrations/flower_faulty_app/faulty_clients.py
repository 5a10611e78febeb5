"""metadp's ClientApp, except that the client of partition-id 1 answers every train message with NaN arrays."""

import torch
from flwr.app import ArrayRecord

from metadp.training.engines import flower


def _garbage(message, context, call_next):
    reply = call_next(message, context)
    if message.metadata.message_type == "train" and int(context.node_config["partition-id"]) == 1:
        arrays = reply.content["arrays"].to_torch_state_dict()
        reply.content["arrays"] = ArrayRecord(torch_state_dict={k: torch.full_like(v, float("nan"))
                                                                for k, v in arrays.items()})
    return reply


client = flower.client_app(mods=[_garbage])
