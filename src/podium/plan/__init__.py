"""Capacity planning: from a measured workload profile to a fleet (``podium plan``).

One concept per module:

- :mod:`~podium.plan.distribution`: a measured distribution as a quantile function;
- :mod:`~podium.plan.profile`: reading a profile (``podium bench --json``, ``podium runs
  profile --json``) into a :class:`~podium.plan.workload.RunShape`;
- :mod:`~podium.plan.workload`: one kind of run, and the what-ifs that change it;
- :mod:`~podium.plan.queueing`: Little's law, Erlang C, M/M/1 and M/G/1 waits;
- :mod:`~podium.plan.simulate`: the discrete-event simulation of a worker process;
- :mod:`~podium.plan.sizing`: the plan (workers, concurrency, gateways, Redis, model calls);
- :mod:`~podium.plan.render`: the plan as text, JSON, Helm values, compose;
- :mod:`~podium.plan.loadgen`, :mod:`~podium.plan.check`, :mod:`~podium.plan.check_report`:
  measuring a plan on this machine (``--check``); :mod:`~podium.plan.confidence`: a
  measured percentile's interval; :mod:`~podium.plan.priority`: measuring processes
  ahead of the machine's other work.

The method is in docs/plan.md.
"""

from podium.plan.distribution import Distribution
from podium.plan.profile import PlanError, ProfileFacts, load_profile
from podium.plan.simulate import HostStalls, LoopWakes, SimResult, simulate
from podium.plan.sizing import Kind, Plan, PlanOptions, make_plan, predict, saturation_rate
from podium.plan.workload import RunShape

__all__ = (
    "Distribution",
    "HostStalls",
    "Kind",
    "LoopWakes",
    "Plan",
    "PlanError",
    "PlanOptions",
    "ProfileFacts",
    "RunShape",
    "SimResult",
    "load_profile",
    "make_plan",
    "predict",
    "saturation_rate",
    "simulate",
)
