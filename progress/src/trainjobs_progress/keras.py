"""A Keras callback that reports progress (TensorFlow's tf.keras, or Keras 3).

    from trainjobs_progress.keras import ProgressCallback
    model.fit(ds, epochs=10, callbacks=[ProgressCallback()])

The step is the number of training batches so far (over all epochs); the total is
epochs x steps per epoch when Keras knows it; the metrics are Keras' logs (loss, accuracy,
and at the end of an epoch the val_ ones). The callback takes Keras' logs as tensors
(`_supports_tf_logs`) and reads them only every `every` batches, so it adds no device sync
to the other batches. Keras is imported when the callback is made, not with this module.
"""

from __future__ import annotations

from typing import Any

import trainjobs_progress

__all__ = ["ProgressCallback"]

_classes: dict[int, type] = {}


def _callback_base(keras: Any = None) -> type:
    if keras is None:
        try:
            import tensorflow as tf  # type: ignore[import-untyped, unused-ignore]

            keras = tf.keras
        except ImportError:
            import keras as keras_module  # type: ignore[import-not-found, unused-ignore]

            keras = keras_module
    base: type = keras.callbacks.Callback
    return base


def ProgressCallback(every: int = 1, keras: Any = None) -> Any:
    """A callback reporting every `every` batches and at every epoch's end. `keras`: the
    Keras module to subclass (default: tensorflow.keras, else keras)."""
    base = _callback_base(keras)
    cls = _classes.get(id(base))
    if cls is None:
        cls = _classes[id(base)] = _make_class(base)
    return cls(max(int(every), 1))


def _make_class(base: type) -> type:
    class _ProgressCallback(base):  # type: ignore[misc]
        _supports_tf_logs = True

        def __init__(self, every: int) -> None:
            super().__init__()
            self.every = every
            self.step = 0
            self.epoch = 0
            self.total: int | None = None

        def on_train_begin(self, logs: Any = None) -> None:
            params = getattr(self, "params", None) or {}
            steps, epochs = params.get("steps"), params.get("epochs")
            self.total = steps * epochs if steps and epochs else None

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.step += 1
            if self.step % self.every == 0:
                trainjobs_progress.report(self.step, total=self.total, epoch=self.epoch,
                                          **dict(logs or {}))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            trainjobs_progress.report(self.step, total=self.total, epoch=epoch,
                                      **dict(logs or {}))

    _ProgressCallback.__name__ = _ProgressCallback.__qualname__ = "ProgressCallback"
    return _ProgressCallback
