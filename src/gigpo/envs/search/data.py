"""Search task sets: the generated world's questions, or Search-R1's parquet files.

Search-R1's parquet (``scripts/data_process/nq_search.py``) rows hold ``id``, ``question``,
``golden_answers`` (list), ``data_source`` (nq, triviaqa, popqa, hotpotqa, 2wikimultihopqa,
musique, bamboogle), ``prompt`` (chat messages with the question wrapped in their template),
``ability``, ``reward_model`` (``{"style": "rule", "ground_truth": {"target": [...]}}``) and
``extra_info`` (``{"split", "index"}``). We need the question and the golden answers; when a
column is missing we fall back to ``reward_model.ground_truth.target`` / the last prompt message.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from gigpo.envs.base import Task
from gigpo.envs.search.world import generate_world

# Search-R1's evaluation sets, by hops; anything else keeps its data_source as task type.
MULTI_HOP_SOURCES = {"hotpotqa", "2wikimultihopqa", "musique", "bamboogle"}
SINGLE_HOP_SOURCES = {"nq", "triviaqa", "popqa"}


def _task_type(source: str) -> str:
    s = source.lower()
    return "multi_hop" if s in MULTI_HOP_SOURCES else "single_hop" if s in SINGLE_HOP_SOURCES else (s or "unknown")


def _as_list(x) -> list[str]:
    if x is None:
        return []
    if isinstance(x, str):
        return [x]
    return [str(a) for a in list(x)]


def load_parquet_tasks(path: str | os.PathLike, split: str) -> list[Task]:
    """All rows of a Search-R1-style parquet file as ``Task``s of ``split`` (file order)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"search data file {path} not found (expected Search-R1's parquet, "
            "with columns question and golden_answers)"
        )
    rows = pq.read_table(path).to_pylist()
    tasks = []
    for n, row in enumerate(rows):
        question = row.get("question")
        if not question and row.get("prompt"):
            question = row["prompt"][-1].get("content", "")
        answers = _as_list(row.get("golden_answers"))
        if not answers:
            gt = (row.get("reward_model") or {}).get("ground_truth") or {}
            answers = _as_list(gt.get("target") if isinstance(gt, dict) else gt)
        if not question or not answers:
            raise ValueError(
                f"{path} row {n}: needs a 'question' and non-empty 'golden_answers' "
                f"(or reward_model.ground_truth.target); columns are {sorted(row)}"
            )
        question = str(question).strip()
        if not question.endswith("?"):
            question += "?"  # as Search-R1's make_prefix does
        source = str(row.get("data_source") or "")
        rid = row.get("id") if row.get("id") is not None else (row.get("extra_info") or {}).get("index", n)
        tasks.append(
            Task(
                "search",
                f"{source or 'data'}:{rid}",
                split,
                _task_type(source),
                {"question": question, "golden_answers": answers, "data_source": source},
            )
        )
    return tasks


def generated_tasks(split: str, world_seed: int = 0) -> list[Task]:
    """The generated world's questions of ``split`` in generation order."""
    return [
        Task(
            "search",
            q.qid,
            split,
            q.task_type,
            {
                "question": q.question,
                "golden_answers": list(q.answers),
                "data_source": "synthetic",
                "hops": [list(h) for h in q.hops],
                "world_seed": world_seed,
            },
        )
        for q in generate_world(world_seed).questions
        if q.split == split
    ]


def make_tasks(
    split: str,
    n: int | None = None,
    seed: int = 0,
    data_path: str | os.PathLike | None = None,
    world_seed: int = 0,
    task_type: str | None = None,
) -> list[Task]:
    """Tasks for ``split``: from ``data_path`` (parquet) if given, else the generated world.

    Args:
        n: how many (None: all); drawn after a shuffle with ``seed`` (deterministic).
        world_seed: which generated world (must match the env's ``world_seed``).
        task_type: keep only this type (``single_hop`` / ``multi_hop``).
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    tasks = load_parquet_tasks(data_path, split) if data_path else generated_tasks(split, world_seed)
    if task_type is not None:
        tasks = [t for t in tasks if t.task_type == task_type]
    random.Random(seed).shuffle(tasks)
    if n is not None:
        if n < 0 or n > len(tasks):
            raise ValueError(
                f"asked for n={n} search tasks but split {split!r} has {len(tasks)}; pass n=None for all or a smaller n"
            )
        tasks = tasks[:n]
    return tasks
