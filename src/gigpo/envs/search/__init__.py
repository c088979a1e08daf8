"""Search-augmented QA (the Search-R1 protocol) over a local BM25 index or a retrieval server.

    make_env(**kwargs) -> SearchEnv      (see ``make_env`` for the retriever choice)
    make_tasks(split, n=None, seed=0, data_path=None, world_seed=0, task_type=None) -> list[Task]

Pieces: ``env`` (the env and the action format), ``retrievers`` (BM25, HTTP client, Search-R1
formatting), ``world`` (the generated offline corpus and questions), ``data`` (task sets,
Search-R1 parquet), ``em`` (exact-match scoring), ``server`` (a Search-R1-compatible
``/retrieve`` server: ``python -m gigpo.envs.search.server --corpus X --port P``).
"""

from __future__ import annotations

import os

from gigpo.envs.search.data import load_parquet_tasks, make_tasks
from gigpo.envs.search.em import exact_match, normalize_answer
from gigpo.envs.search.env import INVALID_ACTION_MESSAGE, SearchEnv, parse_action
from gigpo.envs.search.retrievers import (
    BM25Retriever,
    HTTPRetriever,
    Retriever,
    RetrieverError,
    format_docs,
    load_corpus_jsonl,
)
from gigpo.envs.search.world import generate_world


def make_retriever(
    corpus_path: str | os.PathLike | None = None,
    url: str | None = None,
    world_seed: int = 0,
    timeout: float = 60.0,
    retries: int = 2,
    backoff: float = 1.0,
    cache_dir: str | os.PathLike | None = "default",
) -> Retriever:
    """``HTTPRetriever(url)`` if ``url``; else BM25 over ``corpus_path`` (JSONL) or the generated world."""
    if url and corpus_path:
        raise ValueError("give either url= (a retrieval server) or corpus_path= (a local JSONL corpus), not both")
    if url:
        return HTTPRetriever(url, timeout=timeout, retries=retries, backoff=backoff)
    if corpus_path:
        return BM25Retriever.from_jsonl(corpus_path, cache_dir=cache_dir)
    return BM25Retriever(generate_world(world_seed).docs)  # quick to index; memory cache only


def make_env(
    corpus_path: str | os.PathLike | None = None,
    url: str | None = None,
    topk: int = 3,
    world_seed: int = 0,
    timeout: float = 60.0,
    retries: int = 2,
    backoff: float = 1.0,
    cache_dir: str | os.PathLike | None = "default",
    retriever: Retriever | None = None,
) -> SearchEnv:
    """A ``SearchEnv``.

    Args:
        corpus_path: a JSONL corpus (``{"id", "contents"}`` per line) to index with BM25.
        url: a Search-R1-compatible retrieval endpoint, e.g. ``http://127.0.0.1:8000/retrieve``.
        topk: documents per search (3 as in Search-R1/verl-agent).
        world_seed: the generated world to search when neither corpus_path nor url is given.
        timeout, retries, backoff: HTTP client settings (seconds, extra attempts, seconds).
        cache_dir: on-disk BM25 index cache for corpus_path (None: memory only).
        retriever: a ready ``Retriever`` (overrides the above).
    """
    if retriever is None:
        retriever = make_retriever(corpus_path, url, world_seed, timeout, retries, backoff, cache_dir)
        generated = not (corpus_path or url)
    else:
        generated = False
    return SearchEnv(retriever, topk=topk, world_seed=world_seed if generated else None)


__all__ = [
    "BM25Retriever",
    "HTTPRetriever",
    "INVALID_ACTION_MESSAGE",
    "Retriever",
    "RetrieverError",
    "SearchEnv",
    "exact_match",
    "format_docs",
    "generate_world",
    "load_corpus_jsonl",
    "load_parquet_tasks",
    "make_env",
    "make_retriever",
    "make_tasks",
    "normalize_answer",
    "parse_action",
]
