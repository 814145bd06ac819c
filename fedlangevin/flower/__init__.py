"""FA-LD across real clients with Flower (``pip install 'fedlangevin[flower]'``).

:func:`server_app` / :func:`run_server` (the server: the package's runner driving the
server-round kernel of :mod:`fedlangevin.flower.runner` over the Flower grid: participation
draws, broadcast of the global iterate and the round seed, weighted average, draws,
checkpoints) and :func:`client_app` (a node's K local steps on its own data) run the sampler of
:class:`fedlangevin.FALD` over Flower nodes, in Flower's simulation engine or deployed. The
randomness layout is :mod:`fedlangevin.federation.streams`': the same seed gives the samples of
``FALD(..., streams="per_client")``. ``FlowerRun(sampler="fahmc")`` runs FA-HMC
(:mod:`fedlangevin.fahmc.client` on the nodes, theta and the velocity averaged on the server). See
docs/flower.md.

This package imports without Flower; building an app needs it.
"""

from fedlangevin.flower.client import NodeProblem, client_app, handle_query, handle_train, partitioned
from fedlangevin.flower.runner import FlowerRunner, ServerKernel, serve
from fedlangevin.flower.server import FlowerRun, run_server, server_app
from fedlangevin.flower.trace import Federation, FlowerCommunication, FlowerTrace, load_trace, save_trace

__all__ = [
    "Federation", "FlowerCommunication", "FlowerRun", "FlowerRunner", "FlowerTrace", "NodeProblem", "ServerKernel",
    "client_app", "handle_query", "handle_train", "load_trace", "partitioned", "run_server", "save_trace", "serve",
    "server_app",
]
