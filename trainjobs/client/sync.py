"""`Client`: the same calls as `AsyncClient`, for code that does not use asyncio.

Why a private event loop in a thread: a Jupyter kernel already runs an event loop in the main
thread, where `asyncio.run` is refused; running the async client on a loop of its own works the
same in a notebook, a script and a test. Ctrl-C (a notebook's "interrupt") cancels the call
in flight and leaves the job alone.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator
from typing import Any, TypeVar

from trainjobs.api.models import Job
from trainjobs.client.aio import AsyncClient, JobSource
from trainjobs.client.views import JobEvent, PodInfo
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock
from trainjobs.plugin.manager import PluginManager

__all__ = ["Client"]

T = TypeVar("T")


class Client:
    """Synchronous jobs client; see `AsyncClient` for what each call does."""

    def __init__(self, kubeconfig: str | None = None, namespace: str | None = None, *,
                 plugins: PluginManager | None = None, request_timeout: float = 30.0,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="trainjobs-client")
        self._thread.start()
        self.aio = AsyncClient(kubeconfig, namespace, plugins=plugins,
                               request_timeout=request_timeout, clock=clock)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C: stop the call, not the job
            raise

    def _iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> list[T]:  # [] at the end
            try:
                return [await agen.__anext__()]
            except StopAsyncIteration:
                return []

        try:
            while True:
                item = self._call(step())
                if not item:
                    return
                yield item[0]
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None and not self._loop.is_closed():
                self._call(aclose())

    @property
    def namespace(self) -> str:
        return self.aio.namespace

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self.aio.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self, source: JobSource, namespace: str | None = None) -> Job:
        return self._call(self.aio.create(source, namespace))

    def create_all(self, source: JobSource, namespace: str | None = None) -> list[Job]:
        return self._call(self.aio.create_all(source, namespace))

    def get(self, name: str, kind: str | None = None, namespace: str | None = None) -> Job:
        return self._call(self.aio.get(name, kind, namespace))

    def list(self, kind: str | None = None, namespace: str | None = None, *,
             label_selector: str = "", all_namespaces: bool = False) -> builtins.list[Job]:
        return self._call(self.aio.list(kind, namespace, label_selector=label_selector,
                                        all_namespaces=all_namespaces))

    def delete(self, name: str, kind: str | None = None, namespace: str | None = None, *,
               wait: bool = False, timeout: float | None = None) -> Job:
        return self._call(self.aio.delete(name, kind, namespace, wait=wait, timeout=timeout))

    def checkpoint(self, name: str, kind: str | None = None, namespace: str | None = None,
                   *, wait: bool | float = False) -> Job:
        return self._call(self.aio.checkpoint(name, kind, namespace, wait=wait))

    def watch(self, name: str, kind: str | None = None,
              namespace: str | None = None) -> Iterator[Job]:
        return self._iterate(self.aio.watch(name, kind, namespace))

    def wait(self, name: str, kind: str | None = None, namespace: str | None = None, *,
             until: str | Iterable[str] = "Succeeded", timeout: float | None = None) -> Job:
        return self._call(self.aio.wait(name, kind, namespace, until=until, timeout=timeout))

    def pods(self, name: str, kind: str | None = None,
             namespace: str | None = None) -> builtins.list[PodInfo]:
        return self._call(self.aio.pods(name, kind, namespace))

    def events(self, name: str, kind: str | None = None,
               namespace: str | None = None) -> builtins.list[JobEvent]:
        return self._call(self.aio.events(name, kind, namespace))

    def logs(self, name: str, kind: str | None = None, namespace: str | None = None, *,
             replica: str | None = None, follow: bool = False,
             container: str | None = None) -> Iterator[tuple[str, str]]:
        return self._iterate(self.aio.logs(name, kind, namespace, replica=replica,
                                           follow=follow, container=container))
