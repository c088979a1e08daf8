"""Retrievers behind one small interface, and Search-R1's formatting of what they return.

``Retriever.search(queries, topk) -> list[list[dict]]``: for each query, up to ``topk`` hits,
best first, each ``{"id": str, "title": str, "contents": str, "score": float}`` where
``contents`` is Search-R1's corpus field ``'"Title"\\ntext'``.

* ``BM25Retriever``: a local ``bm25s`` index over ``{"id", "contents"}`` documents; one index per
  distinct corpus is kept in memory (keyed by a hash of the documents), and, for a JSONL corpus
  file, saved on disk under ``cache_dir`` so the next process loads instead of rebuilding.
* ``HTTPRetriever``: a client for a Search-R1-compatible retrieval server
  (``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": true}`` answered by
  ``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}``, as in Search-R1's
  ``search_r1/search/retrieval_server.py``), with a timeout and retries. Failure raises
  ``RetrieverError`` naming the URL and the error; the env lets it through, so the episode ends as
  an env fault.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable, Protocol, Sequence, runtime_checkable

MAX_QUERY_CHARS = 2000  # longer queries are cut: a 100 KB "query" is a model babbling, not a search


class RetrieverError(RuntimeError):
    """The retriever could not answer (server down, timeout, malformed response)."""


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: list[str], topk: int) -> list[list[dict]]:
        """Per query, up to ``topk`` hits ``{"id", "title", "contents", "score"}``, best first."""
        ...


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1's split of ``contents``: the first line is the title (quotes stripped), the rest text."""
    title, _, text = contents.partition("\n")
    return title.strip().strip('"'), text


def format_docs(hits: Sequence[dict]) -> str:
    """Search-R1's ``_passages2string``: ``"Doc 1(Title: t) text\\nDoc 2(Title: ...) ...\\n"``.

    Search-R1 keeps the quotes of the title line (``Doc 1(Title: "Paris") ...``); so do we, so that
    prompts match models trained on Search-R1 data.
    """
    out = []
    for i, hit in enumerate(hits):
        contents = hit.get("contents", "")
        title, _, text = contents.partition("\n")
        out.append(f"Doc {i + 1}(Title: {title}) {text}\n")
    return "".join(out)


def load_corpus_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSONL corpus: one ``{"id", "contents"}`` object per line (Search-R1's wiki-18 format).

    A ``{"id", "title", "text"}`` line is accepted too and turned into ``contents``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"corpus file {path} not found; pass a JSONL file with one "
            '{"id": ..., "contents": "\\"Title\\"\\ntext"} object per line'
        )
    docs = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e})") from None
            if "contents" not in d:
                if "text" not in d:
                    raise ValueError(f'{path}:{n}: a document needs "contents" (or "title"+"text")')
                d = {"id": d.get("id"), "contents": f'"{d.get("title", "")}"\n{d["text"]}'}
            docs.append({"id": str(d.get("id", n - 1)), "contents": str(d["contents"])})
    if not docs:
        raise ValueError(f"corpus file {path} has no documents")
    return docs


def corpus_hash(docs: Iterable[dict]) -> str:
    """A stable hash of the documents (ids and contents), used as the index cache key."""
    h = hashlib.sha256()
    for d in docs:
        h.update(d["id"].encode("utf-8", "replace") + b"\0" + d["contents"].encode("utf-8", "replace") + b"\1")
    return h.hexdigest()[:20]


_INDEX_CACHE: dict[str, object] = {}
_INDEX_LOCK = threading.Lock()


def _tokenize(texts: list[str]):
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", show_progress=False)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gigpo" / "bm25"


class BM25Retriever:
    """Local BM25 (``bm25s``) over ``docs`` (``{"id", "contents"}``).

    Args:
        docs: the corpus, in memory.
        cache_dir: where to save/load the index on disk (None: memory cache only).
    The index is built once per distinct corpus per process (in-memory cache keyed by
    ``corpus_hash``), and loaded from ``cache_dir/<hash>`` when present.
    """

    def __init__(self, docs: Sequence[dict], cache_dir: str | os.PathLike | None = None):
        if not docs:
            raise ValueError("BM25Retriever needs at least one document")
        self.docs = list(docs)
        self.key = corpus_hash(self.docs)
        self.build_seconds = 0.0
        with _INDEX_LOCK:
            index = _INDEX_CACHE.get(self.key)
            if index is None:
                t0 = time.perf_counter()
                index = self._load_or_build(cache_dir)
                self.build_seconds = time.perf_counter() - t0
                _INDEX_CACHE[self.key] = index
        self.index = index

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike, cache_dir: str | os.PathLike | None = "default"):
        """Index a JSONL corpus file; the index is cached on disk (``default_cache_dir()``)."""
        cache = default_cache_dir() if cache_dir == "default" else cache_dir
        return cls(load_corpus_jsonl(path), cache_dir=cache)

    def _load_or_build(self, cache_dir):
        import bm25s

        where = Path(cache_dir) / self.key if cache_dir is not None else None
        if where is not None and (where / "params.index.json").is_file():
            try:
                return bm25s.BM25.load(str(where), show_progress=False)
            except Exception:  # a corrupt or foreign cache entry: rebuild below and overwrite it
                pass
        index = bm25s.BM25()
        index.index(_tokenize([d["contents"] for d in self.docs]), show_progress=False)
        if where is not None:
            tmp = where.with_name(where.name + f".tmp{os.getpid()}")
            index.save(str(tmp), show_progress=False)
            try:
                os.replace(tmp, where)  # atomic: readers never see a half-written index
            except OSError:
                pass  # another process won the race; its index is the same
        return index

    def search(self, queries: list[str], topk: int) -> list[list[dict]]:
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        queries = [q[:MAX_QUERY_CHARS] for q in queries]
        if not queries:
            return []
        k = min(topk, len(self.docs))
        tokens = _tokenize(queries)
        # bm25s raises on a query with no known tokens only if allow_empty=False; empty queries
        # score 0 everywhere and return arbitrary documents, so drop zero-score hits below.
        ids, scores = self.index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        out = []
        for row_ids, row_scores in zip(ids, scores):
            hits = []
            for i, s in zip(row_ids, row_scores):
                if s <= 0:
                    continue
                d = self.docs[int(i)]
                hits.append(
                    {
                        "id": d["id"],
                        "title": split_contents(d["contents"])[0],
                        "contents": d["contents"],
                        "score": float(s),
                    }
                )
            out.append(hits)
        return out


def _error_body(e: urllib.error.HTTPError) -> str:
    """The server's ``{"error": ...}`` message of an HTTP error answer, if it sent one."""
    try:
        msg = json.loads(e.read(4096)).get("error")
    except Exception:
        return ""
    return f" ({str(msg)[:300]})" if msg else ""


class HTTPRetriever:
    """Client for a Search-R1-compatible ``/retrieve`` server.

    Args:
        url: full endpoint, e.g. ``http://127.0.0.1:8000/retrieve`` (Search-R1's default port).
        timeout: seconds per HTTP attempt (verl-agent uses 60).
        retries: extra attempts after a connection error, timeout or 5xx answer.
        backoff: seconds before retry i is ``backoff * i``.
    """

    def __init__(
        self, url: str = "http://127.0.0.1:8000/retrieve", timeout: float = 60.0, retries: int = 2, backoff: float = 1.0
    ):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever url must start with http:// or https://, got {url!r}")
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise ValueError(f"need timeout > 0, retries >= 0, backoff >= 0; got {timeout}, {retries}, {backoff}")
        self.url, self.timeout, self.retries, self.backoff = url, timeout, retries, backoff

    def _post(self, payload: dict) -> dict:
        body = json.dumps(payload).encode()
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * attempt)
            req = urllib.request.Request(
                self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code} {e.reason}" + _error_body(e)
                if e.code < 500:
                    break  # a 4xx will not get better by asking again
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                last = f"malformed JSON response ({e})"
                break
        raise RetrieverError(f"retrieval server {self.url} failed after {attempt + 1} attempt(s): {last}")

    def search(self, queries: list[str], topk: int) -> list[list[dict]]:
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if not queries:
            return []
        queries = [q[:MAX_QUERY_CHARS] for q in queries]
        data = self._post({"queries": queries, "topk": topk, "return_scores": True})
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrieverError(
                f"retrieval server {self.url} answered without a 'result' list of "
                f"{len(queries)} entries: {str(data)[:200]}"
            )
        try:
            return self._hits(result)
        except (AttributeError, TypeError, ValueError) as e:
            raise RetrieverError(
                f"retrieval server {self.url} answered malformed hits ({type(e).__name__}: {e}): {str(result)[:200]}"
            ) from None

    @staticmethod
    def _hits(result: list) -> list[list[dict]]:
        out = []
        for row in result:
            hits = []
            for item in row or []:
                # With return_scores the server wraps each doc as {"document": doc, "score": s};
                # without, it sends the doc itself.
                doc = item.get("document", item) if isinstance(item, dict) else {}
                contents = doc.get("contents")
                if contents is None:
                    contents = f'"{doc.get("title", "")}"\n{doc.get("text", doc.get("content", ""))}'
                hits.append(
                    {
                        "id": str(doc.get("id", "")),
                        "title": split_contents(contents)[0],
                        "contents": contents,
                        "score": float(item.get("score", 0.0) or 0.0),
                    }
                )
            out.append(hits)
        return out
