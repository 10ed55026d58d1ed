"""Benchmarks of the trainjobs operator on the real test control plane (programs, not tests).

``python -m bench.fanout``  fan-out of many jobs against a raw-client ceiling measured in the
same run, API writes per job, writes during a resync.
``python -m bench.scale``   thousands of jobs present: reaction latency, new-job latency against
an empty baseline, the operator's memory and CPU footprint.
``python -m bench.plot``    PNG plots from the JSON results.
(bigjob, cli_yaml, client_read, gcpause, kueue, memory, preemption, progress: see each
module's docstring.)

What the programs share, one concern a module: ``cluster`` (the control plane), ``api`` (the
thin aiohttp client of the bench and the ceiling, raising the transport's typed errors),
``watcher`` (the independent watcher, on the transport's list-then-watch), ``operator`` (the
operator under test as a child process), ``jobs`` (job manifests, the ceiling's objects),
``writes`` (audit log and write counters), ``cpu`` (CPU accounting), ``report`` (logging,
machine, statistics, result files).

Results and method: docs/benchmarks.md.
"""
