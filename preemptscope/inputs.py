"""The CLI's and the service's one call for inputs: local sources, and a Prometheus' servers.

Reading and grouping local sources is ingest's (`ingest/inputs.py`); joining them with the
servers a Prometheus holds needs the fleet, which uses the analysis' reduction, so that join
sits here, above both. It never prints.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from preemptscope.fleet import Fleet, join_local
from preemptscope.ingest.gathered import DeploymentInputs
from preemptscope.ingest.inputs import LoadOptions, load_inputs, split_spec, stem

__all__ = ["LoadOptions", "iter_inputs", "load_inputs", "split_spec", "stem"]


def iter_inputs(
    log_specs: Sequence[str],
    metrics_specs: Sequence[str] = (),
    bench_specs: Sequence[str] = (),
    *,
    options: LoadOptions | None = None,
    fleet: Fleet | None = None,
) -> Iterator[DeploymentInputs]:
    """As load_inputs, plus every server of a Prometheus (`fleet`), read one at a time."""
    given = bool(log_specs or metrics_specs or bench_specs)
    if fleet is None or given:
        local = load_inputs(log_specs, metrics_specs, bench_specs, options=options)
    else:
        local = []
    yield from (join_local(fleet, local) if fleet is not None else local)
