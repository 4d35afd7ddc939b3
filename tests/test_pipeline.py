"""The pipeline (clir_llm.pipeline): runs computed once, kept on disk, and read back the same."""
import yaml

from clir_llm.config import load_config
from clir_llm.pipeline import Pipeline


def test_a_first_stage_that_finds_nothing_is_read_back_as_an_empty_run(tmp_path):
    "BM25 on English queries over Somali documents finds nothing: the empty run file it keeps is read back (it was refused)."
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(dict(name="c", collection="fixture", pairs=["en-so"], measure="MAP",
                                                         experiments=["first_stage"], first_stage=dict(methods=["bm25-og"]))))
    first = Pipeline(load_config(tmp_path / "c.yaml"), tmp_path / "out", progress=False).first_stage("en-so", "bm25-og")
    assert len(first) == 0
    again = Pipeline(load_config(tmp_path / "c.yaml"), tmp_path / "out", progress=False)
    assert len(again.first_stage("en-so", "bm25-og")) == 0 and list(again._paths.values())[0].exists()
