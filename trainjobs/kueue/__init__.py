"""Admission of every job kind through Kueue (kubernetes-sigs/kueue v0.19.2), with no per-kind
code: the operator owns one Workload per job, as Kueue's own job framework
(pkg/controller/jobframework/reconciler.go) does for its built-in integrations.

Pure and typed, no I/O: `model` validates what is read from the cluster, `workload` builds a
job's Workload, `equivalence` decides whether an existing one still matches, `admission`
reduces a Workload to the core's `Admission`, `conditions` computes the status the operator
writes to the Workload, and `reconcile` orders it all as reconciler.go does. docs/kueue-design.md
says where each rule comes from and where trainjobs differs.
"""
