"""Results of a run: the typed settings record, the trace (samples, communication, privacy bridges) and
streaming statistics."""
