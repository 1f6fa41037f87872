"""Podium: a runtime that serves LLM agents at high concurrency on CPUs."""
