"""The ClientApp: this node's Pyro problem on its own data; fedlangevin runs its local rounds."""

from fedlangevin.flower import NodeProblem, client_app
from fedlangevin.problems import PyroProblem

from fald_app.model import load_partition, model


def load(context) -> NodeProblem:
    """Called once per node. The node's problem is built on its data alone; the server sends
    its weight p_c = n_c / n and the node re-weights it (``PyroProblem.share``). Node config:
    ``partition-id`` (its client index c, 0..N-1), optional ``data-path`` and
    ``private-seed`` (the seed of its private noise; keep it secret, default random)."""
    config = context.node_config
    x, y = load_partition(config)
    seed = config.get("private-seed")
    return NodeProblem(PyroProblem(model, [(x, y)]), client=int(config["partition-id"]), num_examples=int(x.shape[0]),
                       private_seed=None if seed is None else int(seed))


app = client_app(load)
