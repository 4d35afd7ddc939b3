"""clir_llm.serve (issue 28 item 4): `clir-llm serve CONFIG` answers Cohere's and Jina's rerank API; the official
`cohere` client gets the order `clir-llm rerank` gives on the same query and documents; hostile requests get a 4xx
with one line of JSON and the server keeps serving; a backend that is down is a 503; concurrent callers are batched."""
import contextlib, io, json, os, socket, subprocess, sys, threading, time
from pathlib import Path
import pytest

pytest.importorskip("fastapi", reason="clir-llm serve needs the `serve` extra (pip install 'clir-llm[serve]')")
import httpx
from clir_llm.core import ClirError, Run
from clir_llm.collections import load_collection
from clir_llm.serve import (RerankService, ServeOptions, ServerThread, cli_serve, load_served, rerank_texts, served_model)
from _rerankers import tiny   # noqa: F401  (a fixture)

TOKEN = "test-token-0123456789"


def _fixture_query():
    "A fixture query and its collection's documents (title and text as one string, as a rerank API sends them), in file order."
    fx = load_collection("fixture", "en-de")
    q = sorted(fx.queries)[0]
    return fx, q, [d.docid for d in fx.iter_docs()], [d.full_text for d in fx.iter_docs()]


@pytest.fixture(scope="module")
def served(tiny, tmp_path_factory):
    "A server of two models on the tiny model (one backend between them) and one whose backend is down; a token is asked."
    os.environ["CLIR_TEST_SERVE_TOKEN"] = TOKEN
    os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-a-real-key-000000")
    llm = f"hf:{tiny['qwen2']}"
    models = [served_model({"name": "prp", "method": "pairwise-heapsort", "llm": llm, "pair": "en-de"}),
              served_model({"name": "listwise", "method": "listwise", "llm": llm, "pair": "en-de", "window": 3, "step": 1}),
              served_model({"name": "down", "method": "listwise", "llm": "openai:gpt-x[base_url=http://127.0.0.1:9/v1,max_retries=0,timeout=2]"})]
    svc = RerankService(models, ServeOptions(port=0, auth_env="CLIR_TEST_SERVE_TOKEN", max_documents=5, max_request_bytes=20_000,
                                             max_document_chars=2_000, cache=str(tmp_path_factory.mktemp("cache"))))
    with ServerThread(svc) as url: yield svc, url


def _auth(): return {"Authorization": f"Bearer {TOKEN}"}


def test_cohere_client_gets_the_order_of_clir_llm_rerank(served, tiny, tmp_path):
    import cohere
    svc, url = served
    fx, q, ids, texts = _fixture_query()
    Run.from_ranked({q: ids}).write(tmp_path / "run.trec")
    with contextlib.redirect_stdout(io.StringIO()):
        from clir_llm.cli_stages import cli_rerank
        assert cli_rerank(["--collection", "fixture", "--pair", "en-de", "--run", str(tmp_path / "run.trec"), "--method", "pairwise-heapsort",
                           "--llm", f"hf:{tiny['qwen2']}", "--top-k", str(len(ids)), "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "rr.trec")]) == 0
    want = [ids.index(d) for d in Run.read(tmp_path / "rr.trec").docids(q)]
    v2 = cohere.ClientV2(api_key=TOKEN, base_url=url).rerank(model="prp", query=fx.queries[q].text, documents=texts)
    v1 = cohere.Client(api_key=TOKEN, base_url=url).rerank(model="prp", query=fx.queries[q].text, documents=texts, top_n=2, return_documents=True)
    assert [r.index for r in v2.results] == want and [r.index for r in v1.results] == want[:2]
    assert v1.results[0].document.text == texts[want[0]] and v2.results[0].relevance_score == 1.0 > v2.results[1].relevance_score
    assert v2.meta.billed_units.search_units == 1 and v2.meta.tokens.input_tokens > 0


def _hostile(url):
    "(name, request, expected status) of requests a server must refuse with one line of JSON."
    ok = {"model": "prp", "query": "malaria", "documents": ["a", "b"]}
    post = lambda path="/v1/rerank", headers=None, **kw: ("POST", path, {"headers": {**_auth(), **(headers or {})}, **kw})
    return [
        ("not JSON", post(content=b'{"model": "prp", "query": '), 400),
        ("a JSON array", post(json=[ok]), 400),
        ("unknown model", post(json={**ok, "model": "gpt-5"}), 404),
        ("no documents", post(json={**ok, "documents": []}), 400),
        ("too many documents", post(json={**ok, "documents": ["d"] * 6}), 400),
        ("query of the wrong type", post(json={**ok, "query": 42}), 400),
        ("documents of the wrong type", post(json={**ok, "documents": "a b"}), 400),
        ("a document object without text", post(json={**ok, "documents": [{"title": "x"}]}), 400),
        ("top_n of zero", post(json={**ok, "top_n": 0}), 400),
        ("top_n as a string", post(json={**ok, "top_n": "2"}), 400),
        ("an empty query", post(json={**ok, "query": "   "}), 400),
        ("a too long document", post(json={**ok, "documents": ["x" * 2_001]}), 400),
        ("a too large body", post(content=json.dumps({**ok, "documents": ["y" * 1_500] * 15}).encode()), 413),
        ("no token", post(headers={"Authorization": ""}, json=ok), 401),
        ("a wrong token", post(headers={"Authorization": "Bearer nope"}, json=ok), 401),
        ("GET on the rerank path", ("GET", "/v1/rerank", {}), 405),
        ("an unknown path", post(path="/v1/embed", json=ok), 404),
    ]


def test_hostile_requests_get_one_line_of_json_and_the_server_keeps_serving(served):
    svc, url = served
    with httpx.Client(base_url=url, timeout=60) as c:
        for name, (method, path, kw), status in _hostile(url):
            r = c.request(method, path, **kw)
            assert r.status_code == status, (name, r.status_code, r.text)
            body = r.json()
            assert list(body) == ["message"] and "\n" not in body["message"] and 0 < len(body["message"]) < 500, (name, body)
            assert "\n" not in r.text.strip() and TOKEN not in r.text, name
            assert c.get("/health").status_code == 200, name
        r = c.post("/v2/rerank", headers=_auth(), json={"model": "listwise", "query": "malaria vaccine", "documents": ["x", "y", "z"], "top_n": 2})
        assert r.status_code == 200 and [x["relevance_score"] for x in r.json()["results"]] == [1.0, round(2 / 3, 6)]


def test_a_backend_that_is_down_is_a_503_and_the_others_still_answer(served):
    svc, url = served
    with httpx.Client(base_url=url, timeout=60, headers=_auth()) as c:
        r = c.post("/v1/rerank", json={"model": "down", "query": "q", "documents": ["a", "b"]})
        assert r.status_code == 503 and list(r.json()) == ["message"] and "model 'down'" in r.json()["message"] and "\n" not in r.text.strip()
        assert c.post("/v1/rerank", json={"model": "prp", "query": "q", "documents": ["a", "b"]}).status_code == 200


def test_concurrent_callers_are_batched_and_share_one_backend(served):
    svc, url = served
    before = dict(svc.stats)
    bodies = [{"model": "prp", "query": f"query number {i}", "documents": [f"doc {i} {j}" for j in range(4)]} for i in range(8)]
    codes = []
    def call(b):
        with httpx.Client(base_url=url, timeout=120, headers=_auth()) as c: codes.append(c.post("/v1/rerank", json=b).status_code)
    threads = [threading.Thread(target=call, args=(b,)) for b in bodies]
    for t in threads: t.start()
    for t in threads: t.join()
    assert codes == [200] * 8
    batches, batched = svc.stats["batches"] - before["batches"], svc.stats["batched_requests"] - before["batched_requests"]
    assert batched == 8 and batches < 8, svc.stats                  # at least two callers' requests reranked in one call
    health = httpx.get(f"{url}/health").json()
    assert len([n for n in health["usage"] if n.startswith("hf:")]) == 1   # prp and listwise: one backend, one account
    assert next(u for n, u in health["usage"].items() if n.startswith("hf:"))["calls"] > 0


def test_a_full_queue_is_a_429(tiny):
    "With max_pending requests waiting, another caller is told to come back (429, Retry-After)."
    svc = RerankService([served_model({"name": "prp", "method": "pairwise-allpair", "llm": f"hf:{tiny['qwen2']}"})],
                        ServeOptions(port=0, max_pending=1, batch_wait=1.0, cache_mode="off"))
    st = ServerThread(svc)
    with st as url:
        assert url.startswith("http://127.0.0.1:")                       # the loopback address by default, a free port
        first = threading.Thread(target=lambda: httpx.post(f"{url}/v1/rerank", json={"model": "prp", "query": "q", "documents": ["a", "b"]}, timeout=60))
        first.start(); time.sleep(0.4)
        r = httpx.post(f"{url}/v1/rerank", json={"model": "prp", "query": "q", "documents": ["a"]}, timeout=60)
        first.join()
        assert r.status_code == 429 and r.headers["retry-after"] == "1" and "busy" in r.json()["message"]
    assert not st.thread.is_alive()                                     # shut down cleanly on leaving the block
    with socket.socket() as s: s.bind(("127.0.0.1", int(url.rsplit(":", 1)[1])))   # and the port is free again


def test_configurations(tmp_path):
    "A serve configuration and an experiment configuration (configs/demo.yaml) name the models; mistakes are one line naming the file."
    models, opts = load_served(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml")
    assert models and all(m.llm is not None and m.docs == "og" for m in models) and opts == {}
    assert [m.name for m in models][:1] == ["Qwen-0.5B listwise"]
    (tmp_path / "s.yaml").write_text("serve: {port: 0, max_documents: 50}\nrerankers:\n  - {name: a, method: pairwise-heapsort, llm: 'hf:x', k: 3, pair: en-fi}\n")
    models, opts = load_served(tmp_path / "s.yaml")
    assert (models[0].name, models[0].spec.options.k, models[0].pair, opts) == ("a", 3, "en-fi", {"port": 0, "max_documents": 50})
    for text, match in [("rerankers: []\n", "a list of one or more reranker rows"),
                        ("rerankers:\n  - {name: a, method: listwise, llm: 'hf:x', k: 3}\n", "reranker 'a': reranker 'listwise' has no option 'k'"),
                        ("rerankers:\n  - {name: a, method: listwise}\n", "uses an LLM"),
                        ("serve: {port: -1}\nrerankers:\n  - {name: a, method: listwise, llm: 'hf:x'}\n", "port"),
                        ("colour: blue\nrerankers: []\n", "unknown key 'colour'")]:
        (tmp_path / "bad.yaml").write_text(text)
        with pytest.raises(ClirError, match=match) as e: load_served(tmp_path / "bad.yaml")
        assert "\n" not in str(e.value) and "bad.yaml" in str(e.value)
    os.environ.pop("CLIR_TEST_UNSET_TOKEN", None)
    with pytest.raises(ClirError, match="auth_env CLIR_TEST_UNSET_TOKEN: the environment variable is unset"):
        RerankService(models, ServeOptions(auth_env="CLIR_TEST_UNSET_TOKEN"))


def test_clir_llm_serve_command(tiny, tmp_path):
    "`clir-llm serve CONFIG --port P` in its own process: the cohere client's answer, /health, and a clean stop."
    import cohere
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    (tmp_path / "serve.yaml").write_text(f"serve: {{cache_mode: 'off'}}\nrerankers:\n  - {{name: prp, method: pairwise-allpair, llm: 'hf:{tiny['qwen2']}'}}\n")
    cli = str(Path(sys.executable).parent / "clir-llm")
    p = subprocess.Popen([cli, "serve", str(tmp_path / "serve.yaml"), "--port", str(port)], stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200: break
            except httpx.HTTPError: time.sleep(0.1)
        r = cohere.ClientV2(api_key="none", base_url=f"http://127.0.0.1:{port}").rerank(model="prp", query="q", documents=["a", "b", "c"])
        assert sorted(x.index for x in r.results) == [0, 1, 2]
    finally:
        p.terminate(); err = p.communicate(timeout=60)[1]
    # SIGTERM: a clean stop (uvicorn shuts down, then re-raises the signal it caught, so the exit status is -SIGTERM)
    assert f"prp on http://127.0.0.1:{port}" in err and p.returncode in (0, -15) and "Traceback" not in err, (p.returncode, err[-500:])


def test_the_command_is_registered():
    from clir_llm.cli import COMMANDS
    assert COMMANDS["serve"][0] == "clir_llm.serve:cli_serve"
    with pytest.raises(SystemExit):
        with contextlib.redirect_stdout(io.StringIO()) as out: cli_serve(["--help"])
    assert "--auth-env" in out.getvalue() and "--max-documents" in out.getvalue()


def test_rerank_texts_batches_requests_into_one_call(tiny):
    "Two requests, one rerank call: each request's diagnostics, each text's index in its new order."
    from clir_llm.llm import get_backend
    from clir_llm.rerank import get_reranker
    rr = get_reranker("pairwise-allpair", get_backend(f"hf:{tiny['qwen2']}"), progress=False)
    orders, diags = rerank_texts(rr, [("q one", ["a", "b", "c"]), ("q two", ["d", "e"])], "en-de")
    assert [sorted(o) for o in orders] == [[0, 1, 2], [0, 1]] and [d["prompts"] for d in diags] == [6, 2]
