"""A global budget of status writes per second: a token bucket that hands out turns.

Why turns rather than yes/no: 5,000 jobs whose only change is their progress all want a
write every interval. Refused with "try again when the next token comes", they would all come
back at once and be refused again, a reconcile storm for nothing. Here each asker is given its
own turn (`reserve`): the bucket may go into debt, and the answer is how long the asker waits
until its token is paid for; asked later it keeps that turn (the caller remembers it). So the
writes are spread evenly at `rate` per second, and a job waits at most (jobs waiting) / rate.
"""

from __future__ import annotations

from trainjobs.operator.clock import Clock

__all__ = ["WriteBudget"]


class WriteBudget:
    """`rate` writes per second, `burst` at once after a quiet while (default: one second's
    worth). Times are the injected clock's monotonic seconds."""

    def __init__(self, rate: float, clock: Clock, burst: float | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"status writes per second must be above 0, got {rate:g}")
        self.rate = rate
        self.burst = max(1.0, rate if burst is None else burst)
        self.clock = clock
        self.tokens = self.burst
        self.at = clock.monotonic()

    def _refill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now

    def reserve(self) -> float:
        """Take one token: the monotonic time it is paid for (now, when one was there). The
        caller writes at that time, not before; it never has to ask again for this write."""
        now = self.clock.monotonic()
        self._refill(now)
        self.tokens -= 1.0
        return now if self.tokens >= 0 else now + (-self.tokens) / self.rate

    def available(self) -> float:
        """Tokens in the bucket now (negative: turns already handed out ahead)."""
        self._refill(self.clock.monotonic())
        return self.tokens
