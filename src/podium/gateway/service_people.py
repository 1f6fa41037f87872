"""What people bring to a :class:`~podium.gateway.service.Gateway` between runs: threads
(conversations that runs continue) and decisions on tool calls waiting for a human. A
mixin of the gateway: its constructor sets what these read, and the gateway reads runs
and hands them to the queue."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podium.engine import decisions
from podium.engine.approvals import PendingApproval
from podium.engine.handoff import find_agent
from podium.engine.records import RunRecord
from podium.errors import DecisionError, ThreadNotFoundError
from podium.gateway.auth import Tenant
from podium.gateway.errors import ApiError
from podium.gateway.metrics import GatewayMetrics
from podium.gateway.outage import UNAVAILABLE
from podium.gateway.served import ServedAgent
from podium.store.base import RunStore
from podium.threads.keeper import ThreadKeeper, keeper_for
from podium.threads.record import ThreadRecord, new_thread_id

__all__ = ("GatewayConversations", "no_thread")


def no_thread(thread_id: str) -> ApiError:
    """The 404 of a thread that is not there (or not the tenant's)."""
    return ApiError(404, "not_found", f"no thread {thread_id!r}", field="thread_id")


class GatewayConversations:
    """Threads and approvals over the gateway's store."""

    store: RunStore
    agents: dict[str, ServedAgent]
    metrics: GatewayMetrics

    async def get(self, tenant: Tenant, run_id: str) -> RunRecord:
        raise NotImplementedError  # the gateway's: the tenant's run, or a 404

    async def _enqueue(self, record: RunRecord) -> None:
        raise NotImplementedError  # the gateway's: hand the run to the queue

    def _settle_later(self, record: RunRecord, *, enqueue: bool) -> None:
        raise NotImplementedError  # the gateway's: hand it over once the queue is back

    @property
    def threads(self) -> ThreadKeeper:
        return keeper_for(self.store)

    async def create_thread(
        self, tenant: Tenant, ttl_s: float | None, metadata: Mapping[str, str]
    ) -> ThreadRecord:
        return await self.threads.create(
            new_thread_id(), tenant.name, ttl_s=ttl_s, metadata=dict(metadata)
        )

    async def get_thread(self, tenant: Tenant, thread_id: str) -> ThreadRecord:
        """The tenant's thread, current (ended runs folded in); another tenant's is a 404."""
        try:
            return await self.threads.read(thread_id, tenant.name)
        except ThreadNotFoundError:
            raise no_thread(thread_id) from None

    async def delete_thread(self, tenant: Tenant, thread_id: str) -> None:
        thread = await self.store.get_thread(thread_id)
        if thread is None or thread.tenant != tenant.name:
            raise no_thread(thread_id)
        await self.store.delete_thread(thread_id)

    # -- human approval --------------------------------------------------------------------

    async def approvals(self, tenant: Tenant, run_id: str | None = None) -> list[PendingApproval]:
        """The tenant's calls waiting for a decision (of one run: 404 if not the tenant's)."""
        if run_id is None:
            return await decisions.list_pending(self.store, tenant=tenant.name, limit=1000)
        return await decisions.run_pending(self.store, await self.get(tenant, run_id))

    async def decide(
        self,
        tenant: Tenant,
        run_id: str,
        call_id: str,
        decision: str,
        *,
        message: str | None = None,
        arguments: str | None = None,
        by: str | None = None,
    ) -> RunRecord:
        """Journal a decision; the step's last one hands the run back to the queue."""
        try:
            record, ready = await decisions.decide(
                self.store, run_id, call_id, decision, message=message, arguments=arguments,
                by=by or tenant.name, tenant=tenant.name, tools=self._tool,
            )
        except DecisionError as exc:
            kind = {404: "not_found", 409: "conflict"}.get(exc.status, "invalid_request")
            raise ApiError(exc.status, kind, str(exc), field=exc.field) from None
        self.metrics.decisions.labels(record.agent, decision).inc()
        if ready:
            try:
                await self._enqueue(record)
            except UNAVAILABLE:
                # The decision is journaled (the client must not decide again): hand the
                # run to the queue once it is back.
                self._settle_later(record, enqueue=True)
        return record

    def _tool(self, record: RunRecord, name: str) -> Any:
        """The tool ``name`` of the agent the run stands with now (after a hand-off, the
        one ``record.active_agent`` names, reached through the served agent's hand-offs)."""
        served = self.agents.get(record.agent)
        current = None if served is None else find_agent(served.agent, record.active_agent)
        return None if current is None else current.tools.get(name)
