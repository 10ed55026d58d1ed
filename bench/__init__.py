"""Benchmarks of the trainjobs operator on the real test control plane (programs, not tests).

``python -m bench.fanout``  fan-out of many jobs against a raw-client ceiling measured in the
same run, API writes per job, writes during a resync.
``python -m bench.scale``   thousands of jobs present: reaction latency, new-job latency against
an empty baseline, the operator's memory and CPU footprint.
``python -m bench.plot``    PNG plots from the JSON results.

Results and method: docs/benchmarks.md.
"""
