"""Cross-cutting feature plugins, built on the same hooks as the framework plugins.

Each module is one plugin, registered through the `trainjobs` entry-point group:
accelerators (volumes/env for extended resources from the controller config), tensorboard
(TfJob's TensorBoard Deployment and Service), tf_ps_server (a standard gRPC server for a PS
without a `tensorflow` container) and managed_redis (a Redis for Caffe2's redis backend).
"""
