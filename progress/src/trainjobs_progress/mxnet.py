"""MXNet callbacks that report progress, for `Module.fit` (or a Gluon loop that calls them).

    from trainjobs_progress.mxnet import BatchEndCallback, EpochEndCallback
    batches = BatchEndCallback(total=10 * batches_per_epoch)
    mod.fit(train, num_epoch=10, batch_end_callback=batches,
            epoch_end_callback=EpochEndCallback(batches))

`BatchEndCallback` is called with MXNet's BatchEndParam (epoch, nbatch, eval_metric): the step
is the number of batches so far over all epochs (nbatch restarts every epoch), the metrics are
the eval metric's name/value pairs. `EpochEndCallback` has fit's epoch-end signature (epoch,
symbol, arg_params, aux_params) and reports the epoch: at the batch callback's step when given
one, else with epochs as steps. Neither imports MXNet: they read only
the attributes MXNet passes.
"""

from __future__ import annotations

from typing import Any

import trainjobs_progress

__all__ = ["BatchEndCallback", "EpochEndCallback", "metric_values"]

def metric_values(eval_metric: Any) -> dict[str, Any]:
    """An MXNet EvalMetric's (possibly composite) name/value pairs as a dict."""
    if eval_metric is None:
        return {}
    try:
        pairs = eval_metric.get_name_value()
    except Exception:
        return {}
    return {str(name): value for name, value in pairs}


class BatchEndCallback:
    """Reports every `every` batches; `total`: the number of batches of the whole run."""

    def __init__(self, total: int | None = None, every: int = 1) -> None:
        self.total = total
        self.every = max(int(every), 1)
        self.step = 0

    def __call__(self, param: Any) -> None:
        self.step += 1
        if self.step % self.every == 0:
            trainjobs_progress.report(self.step, total=self.total,
                                      epoch=getattr(param, "epoch", None),
                                      **metric_values(getattr(param, "eval_metric", None)))


class EpochEndCallback:
    """Reports the end of each epoch (`total`: used only without a batch callback, the
    number of epochs)."""

    def __init__(self, batches: BatchEndCallback | None = None,
                 total: int | None = None) -> None:
        self.batches = batches
        self.total = total

    def __call__(self, epoch: int, symbol: Any = None, arg_params: Any = None,
                 aux_params: Any = None) -> None:
        if self.batches is not None:
            trainjobs_progress.report(self.batches.step, total=self.batches.total, epoch=epoch)
        else:
            trainjobs_progress.report(epoch + 1, total=self.total, epoch=epoch)
