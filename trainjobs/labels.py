"""The labels and annotations trainjobs puts on what it creates: the one place they are named.

Why a leaf module: the core (render, cache, controller), the built-in plugins and a
third-party plugin (through `trainjobs.plugin`) all read them; a module that imports nothing
of the project can be imported by every one of them without an import circle.
"""

__all__ = [
    "ANNOTATION_ATTEMPT",
    "ANNOTATION_CHECKPOINT_REQUEST",
    "ANNOTATION_PLUGIN_PACKAGE",
    "ANNOTATION_REPLICAS",
    "LABEL_COMPONENT",
    "LABEL_FRAMEWORK",
    "LABEL_JOB_NAME",
    "LABEL_JOB_ROLE",
    "LABEL_REPLICA_INDEX",
    "LABEL_REPLICA_TYPE",
]

#: On every object a job owns (its pods, Services, extra objects): the job's name.
LABEL_JOB_NAME = "trainjobs.io/job-name"
LABEL_FRAMEWORK = "trainjobs.io/framework"
LABEL_REPLICA_TYPE = "trainjobs.io/replica-type"
LABEL_REPLICA_INDEX = "trainjobs.io/replica-index"
LABEL_JOB_ROLE = "trainjobs.io/job-role"
#: On a job's extra objects that are no replica (TensorBoard, a managed Redis): what it is.
LABEL_COMPONENT = "trainjobs.io/component"
#: On the pods of kinds whose replicas restart together: the job's attempt they belong to.
ANNOTATION_ATTEMPT = "trainjobs.io/attempt"
#: On every pod: the replica counts its environment was rendered for ("Server=1,Worker=4").
#: Every built-in kind lists its peers (DMLC_NUM_WORKER, TF_CONFIG, NUM_SHARDS), so a pod
#: whose counts differ from the spec's is stale: the planner recreates it.
ANNOTATION_REPLICAS = "trainjobs.io/replicas"
#: On a job: a user's request for a checkpoint now (`trainjobs checkpoint JOB` writes the time);
#: the operator asks once per value (`status.observedCheckpointRequest`), as `kubectl rollout
#: restart` does with its restartedAt annotation.
ANNOTATION_CHECKPOINT_REQUEST = "trainjobs.io/checkpoint-request"
#: On a generated CRD: the Python package of the plugin that serves the kind.
ANNOTATION_PLUGIN_PACKAGE = "trainjobs.io/plugin-package"
