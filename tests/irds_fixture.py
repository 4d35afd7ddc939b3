"""Registers small ir_datasets datasets backed by tests/fixtures/irds (each in its family's upstream format) under
`clir-llm-test/...`; import it (or pass `--plugin irds_fixture` with tests/ on PYTHONPATH) before `irds:` loads them."""

from pathlib import Path
from typing import NamedTuple
import ir_datasets
from ir_datasets.datasets.base import Dataset
from ir_datasets.formats import (
    ExctractedCCDocs,
    ExctractedCCQueries,
    JsonlDocs,
    TrecQrels,
    TrecXmlQueries,
    TsvDocs,
    TsvQueries,
)
from ir_datasets.util import LocalDownload

HERE = Path(__file__).parent / "fixtures" / "irds"
QRELS = {0: "not relevant", 1: "somewhat valuable", 3: "very valuable"}


class MtDoc(NamedTuple):
    "A document with an English machine translation beside its text (as NeuCLIR's translated-document releases)."

    doc_id: str
    text: str
    translated_text: str

    def default_text(self):
        return self.text


def _register(name, *parts):
    if name not in ir_datasets.registry._registered:
        ir_datasets.registry.register(name, Dataset(*parts))


_f = lambda n: LocalDownload(HERE / n)
# neuclir/1/zh/trec-2022 in its own formats: NeuCLIR documents, NeuCLIR 2022 topics (English + ht/mt Chinese), TREC qrels
_register(
    "clir-llm-test/neuclir-like",
    ExctractedCCDocs(_f("neuclir-docs.zh.jsonl"), subset_lang="zh", count=4),
    ExctractedCCQueries(_f("neuclir-topics.jsonl"), subset_lang="zh"),
    TrecQrels(_f("neuclir-qrels.zh.txt"), QRELS),
)
# the same documents with a count in the metadata that the files do not have (a truncated download)
_register(
    "clir-llm-test/neuclir-truncated",
    ExctractedCCDocs(_f("neuclir-docs.zh.jsonl"), subset_lang="zh", count=5),
    ExctractedCCQueries(_f("neuclir-topics.jsonl"), subset_lang="zh"),
    TrecQrels(_f("neuclir-qrels.zh.txt"), QRELS),
)
# mmarco-like TSV passages/queries; the document language is not in the metadata (irds:<id>?pair=en-fa)
_register(
    "clir-llm-test/tsv-nolang",
    TsvDocs(_f("tsv-collection.fa.tsv")),
    TsvQueries(_f("tsv-queries.en.tsv"), lang="en"),
    TrecQrels(_f("tsv-qrels.txt"), QRELS),
)
# TREC XML topics on JSONL documents that carry an English translation field (the shipped DT documents)
_register(
    "clir-llm-test/xml-mt",
    JsonlDocs([_f("mt-docs.zh.jsonl")], doc_cls=MtDoc, lang="zh"),
    TrecXmlQueries(_f("xml-topics.xml"), lang="en"),
    TrecQrels(_f("xml-qrels.txt"), QRELS),
)
# documents only (no queries): not a CLIR collection
_register("clir-llm-test/docs-only", TsvDocs(_f("tsv-collection.fa.tsv"), lang="fa"))
