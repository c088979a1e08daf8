"""Tests for gigpo.envs.search: EM, action parsing, the Search-R1 step protocol, anchors, the
BM25 and HTTP retrievers (against the shipped server on localhost), parquet tasks, the generated
world and its expert."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from gigpo.envs import Task, make_env, make_tasks
from gigpo.envs.search import (
    INVALID_ACTION_MESSAGE,
    BM25Retriever,
    HTTPRetriever,
    RetrieverError,
    exact_match,
    format_docs,
    generate_world,
    load_corpus_jsonl,
    normalize_answer,
    parse_action,
)
from gigpo.envs.search import retrievers as retr
from gigpo.envs.search.server import serve_in_thread

DOCS = [
    {"id": "0", "contents": '"Quorvath Pellin"\nQuorvath Pellin is a glassmaker born in the town of Brisk Hollow.'},
    {"id": "1", "contents": '"Brisk Hollow"\nBrisk Hollow is a town in the republic of Tamsor.'},
    {"id": "2", "contents": '"Tamsor"\nTamsor is a republic whose capital is Vell.'},
    {"id": "3", "contents": '"Ondrel Station"\nOndrel Station is a railway station opened in 1887.'},
]


def _task(question="Where was Quorvath Pellin born?", answers=("Brisk Hollow",), **data) -> Task:
    return Task("search", "t0", "train", "single_hop", {"question": question, "golden_answers": list(answers), **data})


@pytest.fixture(scope="module")
def small_retriever():
    return BM25Retriever(DOCS)


@pytest.fixture()
def env(small_retriever):
    return make_env("search", retriever=small_retriever)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- exact match -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pred, gold, em",
    [
        ("Brisk Hollow", ["Brisk Hollow"], 1.0),
        ("  brisk   HOLLOW. ", ["Brisk Hollow"], 1.0),  # case, punctuation, whitespace
        ("The Brisk Hollow", ["Brisk Hollow"], 1.0),  # article dropped
        ("an apple", ["Apple!"], 1.0),
        ("Brisk", ["Brisk Hollow"], 0.0),  # partial is not exact
        ("Tamsor", ["Vell", "tamsor"], 1.0),  # any golden answer counts
        ("theatre", ["atre"], 0.0),  # articles only as whole words
        ("", ["x"], 0.0),
    ],
)
def test_exact_match_normalises_like_search_r1(pred, gold, em):
    assert exact_match(pred, gold) == em


def test_normalize_answer_steps():
    assert normalize_answer("  The  Cat's  A-Team, an ox ") == "cats ateam ox"


# ---- action parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>hm</think>\n<search> who is X </search>", ("search", "who is X")),
        ("<ANSWER>Vell</Answer>", ("answer", "Vell")),
        ("<answer>a</answer><search>q</search>", ("search", "q")),  # search block first, as verl-agent
        ("<search>unclosed <answer>b</answer>", ("answer", "b")),
        ("no tags at all", ("invalid", "")),
        ("<search>q", ("invalid", "")),
    ],
)
def test_parse_action_first_search_else_first_answer(text, expected):
    assert parse_action(text) == expected


# ---- the step protocol ---------------------------------------------------------------------------


def test_format_docs_matches_search_r1_passages2string():
    hits = [{"contents": '"T1"\nline a\nline b'}, {"contents": '"T2"\nbody'}]
    assert format_docs(hits) == 'Doc 1(Title: "T1") line a\nline b\nDoc 2(Title: "T2") body\n'


def test_search_returns_information_block_with_best_document_first(env):
    obs, info = env.reset(_task())
    assert obs == "Where was Quorvath Pellin born?" and info["anchor"] == obs and info["tool_calls"] == 0
    obs, reward, done, info = env.step("<think>look it up</think><search>Quorvath Pellin</search>")
    assert obs.startswith('<information>Doc 1(Title: "Quorvath Pellin") Quorvath Pellin is a glassmaker')
    assert obs.endswith("</information>") and (reward, done) == (0.0, False)
    assert info["anchor"] == obs and info["tool_calls"] == 1 and info["action_kind"] == "search"
    assert obs.count("Doc ") <= 3  # topk 3


def test_answer_ends_episode_with_em_reward_and_counts_tool_calls(env):
    env.reset(_task())
    env.step("<search>Quorvath Pellin</search>")
    env.step("<search>Brisk Hollow</search>")
    obs, reward, done, info = env.step("<think>done</think><answer>the brisk hollow</answer>")
    assert (obs, reward, done) == ("", 1.0, True)
    assert info["won"] is True and info["score"] == 1.0 and info["tool_calls"] == 2 and info["anchor"] == ""
    # A finished episode stays finished and pays nothing more.
    assert env.step("<answer>Brisk Hollow</answer>")[1:3] == (0.0, True)

    env.reset(_task())
    obs, reward, done, info = env.step("<answer>Tamsor</answer>")
    assert (reward, done, info["won"], info["score"], info["tool_calls"]) == (0.0, True, False, 0.0, 0)


def test_anchor_sequence_question_then_previous_tool_output(env):
    _, info = env.reset(_task())
    anchors = [info["anchor"]]
    for action in ["<search>Brisk Hollow</search>", "I am not sure.", "<search>   </search>"]:
        obs, _, _, info = env.step(action)
        anchors.append(info["anchor"])
    assert anchors[0] == "Where was Quorvath Pellin born?"
    assert anchors[1].startswith("<information>") and "Tamsor" in anchors[1]
    assert anchors[2] == ""  # no <search> query in that step
    assert anchors[3].startswith("Search error") and info["tool_calls"] == 2  # empty query


def test_invalid_action_gets_search_r1_message_and_episode_goes_on(env):
    env.reset(_task())
    obs, reward, done, info = env.step("The answer is Brisk Hollow")
    assert obs == INVALID_ACTION_MESSAGE and (reward, done) == (0.0, False) and info["action_kind"] == "invalid"


@pytest.mark.parametrize(
    "action",
    [
        "",
        "x" * 100_000,
        "<search>" * 20_000,
        "<search>" + "q " * 50_000 + "</search>",
        "\x00\ud800 💥 ✓ ̸ \u202e<search>ünïcødé 東京</search>",
        "</answer><answer>",
    ],
)
def test_any_action_string_is_legal(env, action):
    env.reset(_task())
    t0 = time.perf_counter()
    obs, reward, done, info = env.step(action)
    assert isinstance(obs, str) and reward in (0.0, 1.0) and isinstance(done, bool)
    assert time.perf_counter() - t0 < 5


def test_generated_task_from_another_world_is_refused():
    env = make_env("search", world_seed=1)
    task = make_tasks("search", "train", n=1, world_seed=0)[0]
    with pytest.raises(ValueError, match="world_seed=0"):
        env.reset(task)


# ---- retrievers and the server -----------------------------------------------------------------


def test_http_retriever_against_shipped_server_matches_local_bm25(small_retriever):
    server, url = serve_in_thread(small_retriever)
    try:
        queries = ["Brisk Hollow town", "railway station 1887"]
        local = small_retriever.search(queries, 2)
        remote = HTTPRetriever(url, timeout=10).search(queries, 2)
        assert [[h["id"] for h in r] for r in remote] == [[h["id"] for h in r] for r in local]
        assert remote[1][0]["contents"] == DOCS[3]["contents"]
        assert [h["score"] for h in remote[0]] == pytest.approx([h["score"] for h in local[0]])
        # The wire format is Search-R1's: {"result": [[{"document": {...}, "score": s}]]}.
        req = urllib.request.Request(
            url,
            data=json.dumps({"queries": ["Tamsor"], "topk": 1, "return_scores": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        raw = json.loads(urllib.request.urlopen(req, timeout=10).read())
        assert set(raw["result"][0][0]) == {"document", "score"} and raw["result"][0][0]["document"]["id"] == "2"
        # The env over HTTP sees exactly what it sees locally.
        env_http, env_local = make_env("search", url=url), make_env("search", retriever=small_retriever)
        for e in (env_http, env_local):
            e.reset(_task())
        action = "<search>where was Quorvath Pellin born</search>"
        assert env_http.step(action)[0] == env_local.step(action)[0]
        # A bad request is a clear 400, not a crash of the server.
        bad = urllib.request.Request(
            url, data=b'{"queries": "not a list"}', headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=10)
        assert err.value.code == 400
    finally:
        server.shutdown()
        server.server_close()


def test_down_server_is_an_env_fault_raised_in_bounded_time():
    url = f"http://127.0.0.1:{_free_port()}/retrieve"  # nothing listens there
    env = make_env("search", url=url, timeout=2, retries=2, backoff=0.05)
    env.reset(_task())
    t0 = time.perf_counter()
    with pytest.raises(RetrieverError, match="3 attempt") as err:
        env.step("<search>Quorvath Pellin</search>")
    assert time.perf_counter() - t0 < 5
    assert url in str(err.value) and "Connection" in str(err.value)
    with pytest.raises(RetrieverError):
        HTTPRetriever(url, timeout=1, retries=0).search(["q"], 1)


def test_server_module_runs_as_a_command(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gigpo.envs.search.server", "--corpus", str(corpus), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        assert "serving 4 documents" in proc.stdout.readline().decode()
        hits = HTTPRetriever(f"http://127.0.0.1:{port}/retrieve", timeout=10, retries=0).search(["Tamsor capital"], 1)
        assert hits[0][0]["id"] == "2"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_jsonl_corpus_index_is_cached_on_disk(tmp_path, monkeypatch):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS) + "\n")
    cache = tmp_path / "cache"
    monkeypatch.setattr(retr, "_INDEX_CACHE", {})
    first = BM25Retriever.from_jsonl(corpus, cache_dir=cache)
    assert (cache / first.key / "params.index.json").is_file()
    monkeypatch.setattr(retr, "_INDEX_CACHE", {})  # a "new process": must load from disk
    second = BM25Retriever.from_jsonl(corpus, cache_dir=cache)
    assert second.search(["glassmaker"], 1) == first.search(["glassmaker"], 1)
    assert first.search(["glassmaker"], 1)[0][0]["id"] == "0"


def test_bad_corpus_files_get_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="JSONL"):
        load_corpus_jsonl(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "title": "x"}\n')
    with pytest.raises(ValueError, match="contents"):
        load_corpus_jsonl(bad)


# ---- task sets -----------------------------------------------------------------------------------


def test_search_r1_parquet_tasks_and_jsonl_corpus(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    rows = [  # Search-R1's nq_search.py columns
        {
            "id": "test_0",
            "question": "where was quorvath pellin born",
            "golden_answers": ["Brisk Hollow", "Brisk"],
            "data_source": "nq",
            "prompt": [{"role": "user", "content": "Answer ... Question: where was ..."}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": ["Brisk Hollow"]}},
            "extra_info": {"split": "test", "index": 0},
        },
        {
            "id": "test_1",
            "question": "In which republic is Brisk Hollow?",
            "golden_answers": None,
            "data_source": "hotpotqa",
            "prompt": [{"role": "user", "content": "..."}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": ["Tamsor"]}},
            "extra_info": {"split": "test", "index": 1},
        },
    ]
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    tasks = sorted(make_tasks("search", "eval", data_path=path), key=lambda t: t.task_id)
    assert [t.task_id for t in tasks] == ["hotpotqa:test_1", "nq:test_0"]
    assert tasks[1].data["question"] == "where was quorvath pellin born?"  # '?' added as Search-R1 does
    assert tasks[0].data["golden_answers"] == ["Tamsor"] and tasks[0].task_type == "multi_hop"
    assert tasks[1].task_type == "single_hop" and tasks[1].split == "eval"

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    env = make_env("search", corpus_path=corpus, cache_dir=None)
    for task in tasks:
        obs, _ = env.reset(task)
        obs, _, _, _ = env.step(env.expert_action())
        assert task.data["golden_answers"][0] in obs  # the question's document is retrieved
        _, reward, done, info = env.step(env.expert_action())
        assert done and reward == 1.0 and info["tool_calls"] == 1

    pq.write_table(pa.Table.from_pylist([{"question": "q?", "golden_answers": []}]), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="golden_answers"):
        make_tasks("search", "train", data_path=tmp_path / "x.parquet")


def test_generated_world_is_deterministic_and_splits_are_disjoint():
    a, b = generate_world(0), generate_world.__wrapped__(0)  # bypass the cache: really regenerate
    assert a.docs == b.docs and a.questions == b.questions
    assert generate_world.__wrapped__(1, n_people=50, n_orgs=10).docs[0] != a.docs[0]
    assert len(a.docs) >= 2000 and len({d["id"] for d in a.docs}) == len(a.docs)
    train, ev = make_tasks("search", "train"), make_tasks("search", "eval")
    subj = lambda ts: {t.task_id.split(":")[1] for t in ts}  # noqa: E731
    assert not subj(train) & subj(ev) and not {t.data["question"] for t in train} & {t.data["question"] for t in ev}
    assert {t.task_type for t in ev} == {"single_hop", "multi_hop"}
    assert [t.task_id for t in make_tasks("search", "train", n=20, seed=3)] == [
        t.task_id for t in make_tasks("search", "train", n=20, seed=3)
    ]
    assert make_tasks("search", "eval", n=5, task_type="multi_hop")[0].task_type == "multi_hop"
    with pytest.raises(ValueError, match="has"):
        make_tasks("search", "eval", n=10**6)


def test_generated_answers_are_not_in_the_question():
    for q in generate_world(0).questions[:2000]:
        assert normalize_answer(q.answers[0]) not in normalize_answer(q.question)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_expert_reaches_em_within_four_steps_and_retrieval_finds_each_hop(split):
    env = make_env("search")
    tasks = make_tasks("search", split, n=400, seed=1)
    assert {t.task_type for t in tasks} == {"single_hop", "multi_hop"}
    for task in tasks:
        env.reset(task)
        hops = task.data["hops"]
        for _ in range(4):
            response = env.expert_action()
            assert response.startswith("<think>") and ("</search>" in response or "</answer>" in response)
            obs, reward, done, info = env.step(response)
            if info["action_kind"] == "search":
                assert hops[info["tool_calls"] - 1][1] in obs  # BM25 really surfaces the fact
            if done:
                break
        assert done and info["won"], task
        assert info["tool_calls"] == (2 if task.task_type == "multi_hop" else 1)


def test_state_anchor_is_the_set_of_documents_retrieved_so_far(env):
    _, info = env.reset(_task())
    assert info["state_anchor"] == "docs "
    _, _, _, info = env.step("<search>Brisk Hollow</search>")
    first = info["state_anchor"]
    assert first.startswith("docs ") and "0" in first.split("docs ")[1].split(", ")
    _, _, _, info = env.step("I am not sure.")  # invalid: anchor "", the state stays
    assert info["anchor"] == "" and info["state_anchor"] == first
    _, _, _, info = env.step("<search>Brisk Hollow</search>")  # the same documents again
    assert info["state_anchor"] == first
    assert env.reset(_task())[1]["state_anchor"] == "docs "
