"""Per-trajectory history memory: the (observation, action) pairs shown in later prompts.

Like verl-agent's ``SimpleMemory``: every step stores the observation the action was taken in and
the action sent to the env; a prompt shows the most recent K of them (``env.history_length``:
2 for ALFWorld/WebShop, 4 for search, docs/algorithm.md#paper-settings). For search the stored observation is the
tool output the previous query produced, so history reads results, query, results, query, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class History:
    """The steps of one trajectory, oldest first: ``entries[j] = (observation, action)``."""

    entries: list[tuple[str, str]] = field(default_factory=list)

    def add(self, observation: str, action: str) -> None:
        self.entries.append((observation, action))

    def recent(self, k: int) -> list[tuple[str, str]]:
        """The last ``k`` entries (all of them when fewer)."""
        return self.entries[-k:] if k > 0 else []

    def __len__(self) -> int:
        return len(self.entries)


class Memory:
    """Histories of a batch of env slots, indexed by slot."""

    def __init__(self, num_slots: int) -> None:
        if num_slots < 0:
            raise ValueError(f"Memory needs num_slots >= 0, got {num_slots}")
        self.histories = [History() for _ in range(num_slots)]

    def add(self, slot: int, observation: str, action: str) -> None:
        self.histories[slot].add(observation, action)

    def __getitem__(self, slot: int) -> History:
        return self.histories[slot]

    def __len__(self) -> int:
        return len(self.histories)
