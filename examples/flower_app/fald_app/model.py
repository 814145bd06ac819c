"""Your model and your node's data: the two functions to edit.

``model(data)`` is a Pyro model of ONE client's data (latent sites are the global
parameters, observed sites inside ``pyro.plate`` over the rows), as for
:class:`fedlangevin.problems.PyroProblem`. ``load_partition(node_config)`` returns this
node's data; it never leaves the node. Here: Bayesian linear regression, and a synthetic
partition when the node's config names no file.
"""

import pyro
import pyro.distributions as dist
import torch

DIM = 3


def model(data):
    x, y = data
    beta = pyro.sample("beta", dist.Normal(torch.zeros(DIM, dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(x @ beta, 1.0), obs=y)


def load_partition(node_config) -> tuple[torch.Tensor, torch.Tensor]:
    """The node's (X, y): from ``data-path`` (a file saved with ``torch.save((X, y), path)``)
    if the node was started with ``--node-config 'data-path="..."'``, else a synthetic
    partition drawn from the node's ``partition-id``."""
    if "data-path" in node_config:
        x, y = torch.load(str(node_config["data-path"]), weights_only=True)  # tensors only: no pickled code runs
        return x.double(), y.double()
    g = torch.Generator().manual_seed(1000 + int(node_config["partition-id"]))
    x = torch.randn(40, DIM, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + torch.randn(40, generator=g, dtype=torch.float64)
    return x, y
