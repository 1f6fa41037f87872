"""Closed-form queueing results the planner starts from, and the tests check the
simulation against.

- Little's law: ``L = λ·W``, the runs (or model calls) in flight at a rate and a time each.
- M/M/c (Erlang C): the chance that a burst of CPU work finds every one of ``c`` cores busy,
  and its mean wait. It sizes the cores as if the fleet's CPU were one pool: a lower bound,
  since a Podium worker process is its own queue (one event loop) and a run stays on it.
- M/G/1 (Pollaczek–Khinchine): the mean wait of one loop, with bursts of any spread.

Times in seconds, rates per second. Each function refuses an unstable queue (load at or
above its capacity) with ``math.inf`` for waits: no finite answer exists there.
"""

from __future__ import annotations

import math

__all__ = (
    "erlang_c",
    "little_l",
    "mg1_setup_wait",
    "mg1_setup_wakeups",
    "mg1_wait",
    "min_servers",
    "mm1_wait",
    "mmc_wait",
)


def little_l(rate: float, time_in_system: float) -> float:
    """Little's law: the mean number in the system at ``rate`` arrivals per second, each
    ``time_in_system`` seconds inside."""
    return rate * time_in_system


def erlang_c(servers: int, offered: float) -> float:
    """The chance an arrival waits in an M/M/c queue: ``servers`` servers, ``offered`` load
    in Erlangs (λ/μ). 1.0 where ``offered >= servers`` (every arrival waits, for ever).

    Computed from the Erlang B recursion, which stays stable for thousands of servers
    where the textbook sum of factorials overflows."""
    if servers < 1:
        raise ValueError("servers must be at least 1")
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    rho = offered / servers
    return b / (1.0 - rho + rho * b)


def mmc_wait(rate: float, service_s: float, servers: int) -> float:
    """The mean wait in queue (before service) of an M/M/c queue."""
    offered = rate * service_s
    if offered >= servers:
        return math.inf
    return erlang_c(servers, offered) * service_s / (servers - offered)


def mm1_wait(rate: float, service_s: float) -> float:
    """The mean wait in queue of an M/M/1 queue: ``ρ·S / (1 − ρ)``."""
    return mmc_wait(rate, service_s, 1)


def mg1_wait(rate: float, service_s: float, cv: float) -> float:
    """The mean wait in queue of an M/G/1 queue whose service has this mean and coefficient
    of variation: ``ρ·S·(1 + cv²) / (2(1 − ρ))`` (cv 1 is M/M/1; cv 0, M/D/1, half of it)."""
    rho = rate * service_s
    if rho >= 1:
        return math.inf
    return rho * service_s * (1 + cv * cv) / (2 * (1 - rho))


def mg1_setup_wait(rate: float, service_s: float, cv: float, setup_s: float) -> float:
    """The mean wait in queue of an M/G/1 queue whose server sleeps when it runs out of
    work and takes ``setup_s`` (constant) to wake when the next customer comes: the
    M/G/1 wait plus ``U·(2 + λU) / (2(1 + λU))`` (Takagi, *Queueing Analysis* vol. 1,
    §2.5: exceptional first service). At a trickle every customer waits the whole
    setup; saturated, none does."""
    wait = mg1_wait(rate, service_s, cv)
    u = setup_s
    return wait + u * (2 + rate * u) / (2 * (1 + rate * u))


def mg1_setup_wakeups(rate: float, service_s: float, setup_s: float) -> float:
    """Wake-ups per customer of that queue: busy periods per customer, ``(1 − ρ) /
    (1 + λU)`` (a busy period begins with a setup and ends when the queue is empty)."""
    rho = rate * service_s
    return max(0.0, 1 - rho) / (1 + rate * setup_s)


def min_servers(rate: float, service_s: float, max_wait_s: float) -> int:
    """The fewest servers of an M/M/c queue with a mean wait at most ``max_wait_s``."""
    c = max(1, math.floor(rate * service_s) + 1)
    while mmc_wait(rate, service_s, c) > max_wait_s:
        c += 1
    return c
