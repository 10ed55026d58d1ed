"""The gates the operator knows (see `base` for what a gate is): the one place they are wired.

Adding a gate is a module beside this one with a `GateFactory`, and its line here.
"""

from trainjobs.operator.gates.base import Gate, GateContext, GateFactory, Gates, Verdict
from trainjobs.operator.gates.checkpoint import CHECKPOINT
from trainjobs.operator.gates.kueue import KUEUE
from trainjobs.operator.gates.progress import PROGRESS

__all__ = ["FACTORIES", "Gate", "GateContext", "GateFactory", "Gates", "Verdict"]

#: Every kind of gate the operator knows, asked in this order.
FACTORIES: tuple[GateFactory, ...] = (
    KUEUE,
    PROGRESS,
    CHECKPOINT,
)
