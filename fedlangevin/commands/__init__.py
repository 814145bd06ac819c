"""One module per command-line command (see fedlangevin.cli)."""
