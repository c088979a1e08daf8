"""A minimal env family outside ``src/gigpo``: say the word the task names.

The task names a fruit; each step lists ``say <fruit>`` actions; saying the named one wins. It is
the example of ``docs/extending.md`` and the fixture of ``tests/test_envs_spec.py``.
"""

from __future__ import annotations

import random

from gigpo.envs import FamilySpec, Task

WORDS = ("apple", "pear", "plum", "fig", "lime", "kiwi")


class EchoEnv:
    family = "echo"

    def __init__(self, choices: int = 3):
        self.choices = choices
        self.word, self.options, self.steps = "", [], 0

    def reset(self, task: Task):
        rng = random.Random(task.task_id)
        self.word = task.data["word"]
        others = [w for w in WORDS if w != self.word]
        self.options = sorted([self.word, *rng.sample(others, self.choices - 1)])
        self.steps = 0
        return "You hold a basket of fruit.", self._info(False)

    def step(self, action: str):
        self.steps += 1
        won = action.strip() == f"say {self.word}"
        obs = "Correct." if won else f"You said {action.strip()[:40]!r}; nothing happens."
        return obs, float(won), won, self._info(won)

    def expert_action(self) -> str:
        return f"say {self.word}"

    def close(self) -> None:
        pass

    def _info(self, won: bool) -> dict:
        return {
            "won": won,
            "score": float(won),
            "instruction": f"say the word {self.word}",
            "task_type": "echo",
            "admissible_actions": [f"say {w}" for w in self.options],
        }


def make_env(choices: int = 3) -> EchoEnv:
    return EchoEnv(choices)


def make_tasks(split: str, n: int | None = None, seed: int = 0) -> list[Task]:
    # train: even task ids, eval: odd ones, so the splits are disjoint.
    ids = range(0 if split == "train" else 1, 200, 2)
    rng = random.Random(seed)
    tasks = [Task("echo", str(i), split, "echo", {"word": rng.choice(WORDS)}) for i in ids]
    return tasks if n is None else tasks[:n]


FAMILY_SPEC = FamilySpec(
    name="echo",
    module=__name__,
    system_prompt="You are an agent that repeats words.",
    action_format="Reason inside <think> </think>, then give one admissible action inside <action> </action>.",
    default_history=1,
    fallback_tail=10,
    expert_reason=lambda action: f"The task names the word; I {action}.",
    env_kwargs={"choices": 3},
)
