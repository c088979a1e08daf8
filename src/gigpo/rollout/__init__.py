"""The multi-turn rollout: the loop that joins envs, agent and policy into a StepBatch, evaluation
rollouts and their metrics, JSONL trajectory dumps, expert demonstrations for SFT, and the
prompting agents' evaluation (``prompting``: ReAct few-shot examples, Reflexion trials)."""

from gigpo.rollout.demos import collect_expert_demos
from gigpo.rollout.jsonl import write_trajectories_jsonl
from gigpo.rollout.loop import eval_rollout, evaluate, rollout
from gigpo.rollout.metrics import rollout_metrics
from gigpo.rollout.prompting import collect_fewshot, prompting_eval

__all__ = [
    "collect_expert_demos",
    "collect_fewshot",
    "eval_rollout",
    "evaluate",
    "prompting_eval",
    "rollout",
    "rollout_metrics",
    "write_trajectories_jsonl",
]
