"""NLLB's real code path (NllbTokenizer, M2M100 generate with forced BOS) on a tiny random model built here, offline."""
import json, subprocess, sys
from pathlib import Path
import pytest
import torch
from clir_llm.cache import Cache, CacheMiss
from clir_llm.core import ClirError
from clir_llm.translate import (NLLBTranslator, tiny_nllb, get_translator, translate_queries, translate_documents,
                                sentence_splitter, save_accounting)
from clir_llm.collections import load_collection


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_nllb(tmp_path_factory.mktemp("m") / "tiny-nllb")


def make(model_dir, tmp_path, **kw):
    kw = {"max_new_tokens": 10, "batch_size": 4, "progress": False, **kw}
    return NLLBTranslator(str(model_dir), cache=Cache(tmp_path / "cache"), **kw)


DOCS = ["Das ist der erste Satz. Hier kommt der zweite Satz! Und ein dritter?",
        "Hier kommt der zweite Satz! Kurz.",
        "Ein sehr langer Satz mit vielen Wörtern, der länger ist als alle anderen Sätze in diesem kleinen Test.",
        "", "Kurz."]


def test_language_codes_and_forced_bos(model_dir, tmp_path):
    t = make(model_dir, tmp_path)
    for lang, code in [("de", "deu_Latn"), ("fi", "fin_Latn"), ("ru", "rus_Cyrl"), ("sw", "swh_Latn"), ("yo", "yor_Latn")]:
        ids = t.encode(["Hallo."], lang)["input_ids"][0].tolist()
        assert t._tok.convert_ids_to_tokens(ids[0]) == code and ids[-1] == t._tok.eos_token_id
    # generate() really starts every output with the target code: check the raw ids of one batch
    enc = t.encode(["Hallo Welt.", "Wie geht es?"], "de")
    for tgt, code in [("en", "eng_Latn"), ("fi", "fin_Latn")]:
        out = t._model.generate(**enc, forced_bos_token_id=t.lang_code_id(tgt), num_beams=1, do_sample=False, max_new_tokens=5)
        assert t._tok.convert_ids_to_tokens(out[:, 1].tolist()) == [code, code]
    # different targets give different outputs (the forced code conditions the decoder)
    assert t.translate(DOCS[:1], "de", "en") != t.translate(DOCS[:1], "de", "fi")


def test_batching_equals_unbatched_and_reassembly(model_dir, tmp_path):
    batched = make(model_dir, tmp_path / "a", batch_size=8).translate(DOCS, "de", "en")
    one = make(model_dir, tmp_path / "b", batch_size=1)
    per_sentence = {s: one.translate([s], "de", "en")[0] for d in DOCS for s in sentence_splitter("de")(d)}
    # every document is its sentences' translations, in order, joined with a space
    expected = [" ".join(per_sentence[s] for s in sentence_splitter("de")(d)) for d in DOCS]
    assert batched == expected
    assert batched[3] == "" and batched[1].startswith(per_sentence["Hier kommt der zweite Satz!"])
    assert len(set(per_sentence.values())) > 3          # the random model's output depends on its input
    naive = make(model_dir, tmp_path / "c", batch_size=3)
    assert naive.translate_per_document(DOCS, "de", "en") == batched


def test_truncation_at_128_tokens(model_dir, tmp_path):
    t = make(model_dir, tmp_path)
    long = "Wort " * 100 + "Ende"                      # character vocabulary: ~500 tokens, one sentence
    enc = t.encode([long], "de")
    assert enc["input_ids"].shape[1] == 128 and enc["input_ids"][0, -1].item() == t._tok.eos_token_id
    # what lies beyond 128 tokens cannot change the translation
    assert t.translate([long], "de", "en") == t.translate([long + "x und noch mehr Text"], "de", "en")
    short = make(model_dir, tmp_path / "s", max_length=16)
    assert short.encode([long], "de")["input_ids"].shape[1] == 16


def test_cache_resume_and_accounting(model_dir, tmp_path):
    t = make(model_dir, tmp_path, batch_size=2)
    calls = []
    orig = t._translate_batch
    def killed(batch, src, tgt):
        calls.append(len(batch))
        if len(calls) == 2: raise KeyboardInterrupt("killed")
        return orig(batch, src, tgt)
    t._translate_batch = killed
    with pytest.raises(KeyboardInterrupt): t.translate(DOCS, "de", "en")
    n_unique = len({s for d in DOCS for s in sentence_splitter("de")(d)})
    # a new process (new translator, same cache folder) resumes: the first batch is not translated again
    t2 = make(model_dir, tmp_path, batch_size=2)
    out = t2.translate(DOCS, "de", "en")
    assert t2.usage.cache_hits == 2 and t2.usage.counters["translated_sentences"] == n_unique - 2
    # warm re-run: no model call at all, even in replay mode
    t3 = make(model_dir, tmp_path, batch_size=2)
    t3.cache = Cache(tmp_path / "cache", mode="replay")
    assert t3.translate(DOCS, "de", "en") == out and t3.usage.calls == 0 and t3._model is None
    t4 = make(model_dir, tmp_path); t4.cache = Cache(tmp_path / "cache", mode="replay")
    with pytest.raises(CacheMiss): t4.translate(["Ein neuer Satz."], "de", "en")
    acc = json.loads(save_accounting(tmp_path / "acc.json", t2, pair="en-de").read_text())
    assert acc["splitters"] == {"de": "punkt:german"} and acc["usage"]["tokens_in"] > 0 and acc["usage"]["tokens_out"] > 0
    assert acc["usage"]["counters"]["sentences"] == sum(len(sentence_splitter("de")(d)) for d in DOCS)
    assert acc["cache_hit_rate"] == round(2 / n_unique, 4) and acc["identity"]["revision"].startswith("local-")


def test_cache_key_changes_with_model(model_dir, tmp_path):
    other = tiny_nllb(tmp_path / "other", seed=1)
    a, b = make(model_dir, tmp_path), make(other, tmp_path)
    assert a.revision != b.revision
    b.translate(["Hallo Welt."], "de", "en")
    assert b.usage.calls == 1
    a.translate(["Hallo Welt."], "de", "en")
    assert a.usage.calls == 1 and a.usage.cache_hits == 0    # another model's translation is never reused


def test_views_on_fixture(model_dir, tmp_path):
    fx = load_collection("fixture", "en-de")
    t = make(model_dir, tmp_path)
    dt = translate_documents(fx, t, chunk_size=2)
    docs = list(dt.iter_docs())
    assert [d.docid for d in docs] == [d.docid for d in fx.iter_docs()] and all(d.lang == "en" for d in docs)
    assert dt.doc_lang == "en" and dt.query_lang == "en" and dt.key != fx.key
    calls = t.usage.calls
    assert dt.get_doc(docs[1].docid) == docs[1] and t.usage.calls == calls      # served from the sentence cache
    qt = translate_queries(fx, t)
    assert qt.query_lang == "de" and set(qt.queries) == set(fx.queries) and qt.key not in (fx.key, dt.key)
    assert translate_queries(fx, make(model_dir, tmp_path / "x")).key == qt.key   # same model + settings: same key
    assert translate_queries(fx, make(model_dir, tmp_path / "y", max_new_tokens=11)).key != qt.key


def test_get_translator_and_errors(model_dir, tmp_path):
    t = get_translator(f"nllb:{model_dir}", cache=Cache(tmp_path), max_new_tokens=4, progress=False)
    assert isinstance(t, NLLBTranslator) and t.name == "nllb:tiny-nllb"
    with pytest.raises(ClirError, match="same|both"): t.translate(["x"], "de", "de")
    with pytest.raises(ClirError, match="unknown language"): t.translate(["x"], "de", "xx")
    with pytest.raises(ClirError, match="cannot load"): NLLBTranslator(str(tmp_path / "nothing-here"), cache=Cache(tmp_path)).load()


def test_cli_documents_with_local_nllb(model_dir, tmp_path):
    cli = str(Path(sys.executable).parent / "clir-llm")
    env = {"CLIR_LLM_CACHE": str(tmp_path / "c"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([cli, "translate", "--collection", "fixture", "--pair", "en-fi", "--what", "documents",
                        "--translator", f"nllb:{model_dir}", "--out", str(tmp_path / "o"), "--batch-size", "8",
                        "--max-new-tokens", "8"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(l) for l in (tmp_path / "o" / "documents.en.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and {"docid", "title", "text"} <= set(lines[0])
    acc = json.loads((tmp_path / "o" / "documents.translation.json").read_text())
    assert acc["splitters"] == {"fi": "punkt:finnish"} and acc["src"] == "fi" and acc["tgt"] == "en" and acc["items"] == 4
