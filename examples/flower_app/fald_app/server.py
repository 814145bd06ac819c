"""The ServerApp: FA-LD's server (participation draws, averaging, draws, checkpoints)."""

from flwr.serverapp import ServerApp

from fedlangevin.fald import Full, SchemeI, SchemeII
from fedlangevin.flower import FlowerRun, run_server, save_trace

app = ServerApp()


def settings(config) -> FlowerRun:
    """The run's settings from the app's run config (pyproject.toml, ``flwr run -c ...``)."""
    scheme, s = config["participation"], int(config["num-sampled"])
    rules = {"full": Full(), "I": SchemeI(s), "II": SchemeII(s)}
    if scheme not in rules:
        raise ValueError(f"participation must be 'full', 'I' or 'II'; got {scheme!r}")
    return FlowerRun(
        rounds=int(config["rounds"]), step_size=float(config["step-size"]), num_nodes=int(config["num-nodes"]),
        local_steps=int(config["local-steps"]), temperature=float(config["temperature"]),
        correlation=float(config["correlation"]), participation=rules[scheme], chains=int(config["chains"]),
        seed=int(config["seed"]), warmup=int(config["warmup"]), thin=int(config["thin"]),
    )


@app.main()
def main(grid, context) -> None:
    trace = run_server(grid, settings(context.run_config))
    save_trace(trace, str(context.run_config["output"]))
    comm = trace.communication
    print(f"FA-LD: {trace.num_draws} draws of {trace.num_chains} chains, {trace.seconds_per_round * 1e3:.1f} ms/round, "
          f"{(comm.bytes_up + comm.bytes_down) / comm.rounds:.0f} bytes/round")
