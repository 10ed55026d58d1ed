"""The one error the test control plane raises."""

from __future__ import annotations

from trainjobs.errors import TrainjobsError


class ControlPlaneError(TrainjobsError):
    """The test control plane could not be built, started, reached or stopped.

    The message names the component and, where one exists, the log file to read.
    """
