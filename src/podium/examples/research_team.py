"""A research team: a lead agent fans a question out to researchers (sub-agents), then
writes the summary.

    podium run research-team "How does Podium keep runs durable and fast?"

The lead calls its ``researcher`` tool (``researcher.as_tool()``) once per aspect
of the question, all in one reply; each call is a child run of the lead's run with its
own journal and profile (``podium runs show`` prints the tree), at most
``max_parallel_children`` of them at once. Each researcher looks its aspect up in the
team's notes (``search``), answers, and the lead summarizes the answers. Both agents
run on the simulated model with policy functions, so the example needs no backend.
"""

from __future__ import annotations

import re

from podium import Agent, LatencyModel, ModelRequest, SimStep, SimToolCall, SimulatedModel, tool

__all__ = ("ASPECTS", "NOTES", "agent", "build_agent", "lead_policy", "researcher_policy", "search")

#: What the lead asks a researcher about when the question names none of the notes' topics.
ASPECTS = ("durability", "throughput", "observability")

NOTES = {
    "durability": "Every step is checkpointed to the run's journal before its effects are "
    "acknowledged; a resumed run never repeats a completed tool call.",
    "throughput": "One event loop per core drives thousands of runs; the prompt prefix is "
    "rendered once per agent and tool arguments are validated in one pass.",
    "observability": "Every phase of every step is timed (wall and CPU): the workload profile, "
    "OpenTelemetry spans and Prometheus metrics come from it.",
    "security": "Tools run only if the agent allows them; HTTP tools pass an egress policy "
    "and tool output an injection screen.",
    "hand-offs": "A transfer_to_<agent> tool hands the conversation to another agent, "
    "journaled with its step.",
}


@tool
async def search(topic: str) -> str:
    """Search the team's notes.

    Args:
        topic: One topic, e.g. "durability".
    """
    key = topic.strip().lower()
    for name, text in NOTES.items():
        if name in key or key in name:
            return f"{name}: {text}"
    return f"no notes on {topic!r} (topics: {', '.join(NOTES)})"


def _aspects(question: str) -> list[str]:
    named = [topic for topic in NOTES if re.search(rf"\b{re.escape(topic)}", question, re.I)]
    return named[:3] or list(ASPECTS)


def researcher_policy(request: ModelRequest) -> SimStep | str:
    """Search the topic given as input, then answer with what the notes say."""
    messages = request.messages
    found = [m.content for m in messages if m.role == "tool"]
    if not found:
        return SimStep(tool_calls=(SimToolCall("search", {"topic": messages[1].content}),))
    return found[-1]


def lead_policy(request: ModelRequest) -> SimStep | str:
    """Ask one researcher per aspect in one reply; then summarize their answers."""
    messages = request.messages
    answers = [m for m in messages if m.role == "tool"]
    if not answers:
        aspects = _aspects(messages[1].content)
        calls = tuple(SimToolCall("researcher", {"input": a}) for a in aspects)
        return SimStep(content=f"Asking {len(calls)} researchers.", tool_calls=calls)
    lines = [f"Summary of {len(answers)} researchers' findings:"]
    lines.extend(f"- {m.content}" for m in answers)
    return "\n".join(lines)


def build_agent(*, max_parallel_children: int = 3, latency_s: float = 0.01) -> Agent:
    """The lead agent, with a fresh researcher as its sub-agent."""
    latency = LatencyModel(ttft_s=latency_s)
    researcher = Agent(
        "researcher",
        SimulatedModel(researcher_policy, latency=latency, seed=0),
        "You research one topic in the team's notes and report what they say.",
        [search],
        max_steps=4,
        description="Research one topic in the team's notes and report what they say",
    )
    return Agent(
        "research-team",
        SimulatedModel(lead_policy, latency=latency, seed=0),
        "You split a question into topics, ask a researcher about each, then summarize.",
        [researcher.as_tool()],
        max_steps=4,
        max_parallel_children=max_parallel_children,
    )


agent = build_agent()
