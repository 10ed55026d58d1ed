"""`trainjobs convert`: Kubeflow's and the old operators' job manifests as trainjobs jobs.

One module per source form (kubeflow_v1: TFJob/MXJob with tfReplicaSpecs/mxReplicaSpecs;
tf_v1alpha1, mx_v1alpha1: the list forms; caffe2_v1alpha1), sharing `base` (notes, metadata,
restart policies) and `legacy` (list-form replica specs); `documents` dispatches.
"""

from trainjobs.convert.base import Note, NoteKind
from trainjobs.convert.documents import Converted, convert_document, convert_documents, is_old_job

__all__ = ["Converted", "Note", "NoteKind", "convert_document", "convert_documents",
           "is_old_job"]
