"""Workers: claim queued runs and drive them."""

from podium.worker.worker import Worker, WorkerStatistics

__all__ = ("Worker", "WorkerStatistics")
