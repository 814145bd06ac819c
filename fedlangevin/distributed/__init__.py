"""FA-LD and FA-HMC on ``torch.distributed``: the clients sharded over ranks (processes, GPUs, machines).

Every rank runs the same program with the same seed::

    import fedlangevin as fl
    from fedlangevin import distributed

    distributed.init()                      # under torchrun: rendezvous from the environment
    sampler = fl.FALD(problem, step_size=1e-3, chains=16, seed=0,
                      transport=distributed.ProcessGroup())
    trace = sampler.run(200)                # rank 0's trace holds the draws

:class:`ProcessGroup` holds this rank's block of clients (``torch.tensor_split`` of 0..N-1)
and all-reduces (SUM) the partial weighted sums of the synchronisation, the only
cross-client operation of FA-LD (``fl.FAHMC(..., transport=...)`` all-reduces its theta and v
the same way, in one reduce). :func:`launch` runs a function in W local processes (tests,
benchmarks, one-machine runs from Python); ``torchrun ... -m fedlangevin.distributed`` runs
a sampler from the command line. See ``docs/distributed.md``.
"""

from fedlangevin.distributed.launcher import Workers, WorkerError, init, launch
from fedlangevin.distributed.transport import ProcessGroup, RankFailure, split_clients

__all__ = ["ProcessGroup", "RankFailure", "WorkerError", "Workers", "init", "launch", "split_clients"]
