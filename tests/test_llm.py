"""The LLM backend interface (clir_llm.llm): one registry, specs parsed once with each kind's own options, keys and cache
identities byte-identical to the code before options lived with their kinds (identity v1), options on the command line
generated per kind, the cached and batched machinery with an injected executor, call keys."""

import argparse, json, pickle, shutil, sys, types
from pathlib import Path
import pytest, yaml
from clir_llm.cache import Cache
from clir_llm.core import ClirError
from clir_llm.executor import LOCAL, LocalExecutor
from clir_llm.cli_args import add_backend_arguments, backend_spec_from_args, llm_of_argv
from clir_llm.llm import (
    BACKENDS,
    Backend,
    BackendOptions,
    BackendSpec,
    CachedBackend,
    LLMError,
    call_key,
    get_backend,
    given_names,
    kind_class,
    lay_over,
    output_options,
    plain_text,
    rebuild_backend,
)
from clir_llm.specs import opt
from clir_llm.testing import make_tiny_hf_model
import _reliability as R
from clir_llm.core import Run
from clir_llm.testing import FakeOpenAIServer

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- identity v1: literal values of the code before (7ce5228)
KEYS_V1 = {  # spec -> BackendSpec.key(), captured from 7ce5228 (a checkout of that commit on PYTHONPATH)
    "gguf:/m/x.gguf": "gguf:/m/x.gguf",
    "gguf:/m/x.gguf[max_model_len=2048]": "gguf:/m/x.gguf[max_model_len=2048]",
    "gguf:/models/a@b/x.gguf": "gguf:/models/a@b/x.gguf",
    "hf:Qwen/Qwen2.5-7B-Instruct@main": "hf:Qwen/Qwen2.5-7B-Instruct@main",
    "hf:meta-llama/Llama-3.1-8B-Instruct@abc123": "hf:meta-llama/Llama-3.1-8B-Instruct@abc123",
    "hf:qwen2.5-coder-0.5b-offline": "hf:qwen2.5-coder-0.5b-offline",
    "hf:qwen2.5-coder-0.5b-offline[dtype=bfloat16]": "hf:qwen2.5-coder-0.5b-offline[dtype=bfloat16]",
    "hf:qwen2.5-coder-0.5b-offline[quantize=int8]": "hf:qwen2.5-coder-0.5b-offline[quantize=int8]",
    "hf:x": "hf:x",
    "hf:x[device=cuda,batch_size=4,device_map=auto]": "hf:x",
    "hf:x[dtype=bfloat16]": "hf:x[dtype=bfloat16]",
    "hf:x[dtype=float32]": "hf:x[dtype=float32]",
    "hf:x[max_model_len=100,tokenizer=t,quantize=int8,dtype=float32]": "hf:x[dtype=float32,tokenizer=t,max_model_len=100,quantize=int8]",
    "hf:x[max_model_len=4096]": "hf:x[max_model_len=4096]",
    "hf:x[quantize=int8]": "hf:x[quantize=int8]",
    "hf:x[tokenizer=org/tok]": "hf:x[tokenizer=org/tok]",
    "openai:gpt-4.1": "openai:gpt-4.1",
    "openai:gpt-4.1[api=chat]": "openai:gpt-4.1[api=chat]",
    "openai:gpt-4.1[api=completions,tokenizer=org/tok]": "openai:gpt-4.1[tokenizer=org/tok,api=completions]",
    "openai:gpt-4.1[prefill=true]": "openai:gpt-4.1[prefill=true]",
    "openai:gpt-4.1[tokenizer=tiktoken:/x/cl100k.tiktoken]": "openai:gpt-4.1[tokenizer=tiktoken:/x/cl100k.tiktoken]",
    "openai:m[concurrency=16,endpoint=srv,api_key_env=MYKEY]": "openai:m",
    "openai:m[max_model_len=8192,prefill=true]": "openai:m[prefill=true,max_model_len=8192]",
    "openai:m[prefill=false]": "openai:m[prefill=false]",
    "ort:/m/x": "ort:/m/x",
    "ort:/m/x[block_size=16]": "ort:/m/x[block_size=16]",
    "ort:/m/x[precision=fp32]": "ort:/m/x[precision=fp32]",
    "ort:/m/x[precision=int8,block_size=64]": "ort:/m/x[precision=int8,block_size=64]",
    "ort:qwen2.5-coder-0.5b-offline": "ort:qwen2.5-coder-0.5b-offline",
    "ort:qwen2.5-coder-0.5b-offline[precision=int8]": "ort:qwen2.5-coder-0.5b-offline[precision=int8]",
    "vllm:meta-llama/Llama-3.1-8B-Instruct": "vllm:meta-llama/Llama-3.1-8B-Instruct",
    "vllm:meta-llama/Llama-3.1-8B-Instruct@main[dtype=float16,tensor_parallel_size=2,enable_prefix_caching=true,gpu_memory_utilization=0.9,batch_size=64,max_model_len=8192,tokenizer=t]": "vllm:meta-llama/Llama-3.1-8B-Instruct@main[dtype=float16,tokenizer=t,max_model_len=8192]",
    '{"base_url": ["http://a:8000/v1", "http://b:8000/v1"], "concurrency": 8, "prefill": true, "spec": "openai:meta-llama/Llama-3.1-8B-Instruct"}': "openai:meta-llama/Llama-3.1-8B-Instruct[prefill=true]",
    '{"batch_size": 16, "dtype": "float16", "spec": "hf:x"}': "hf:x[dtype=float16]",
    '{"block_size": "64", "precision": "int4", "spec": "ort:/m/x"}': "ort:/m/x[precision=int4,block_size=64]",
}

# case -> (identity() as sorted JSON, name, label, spec key), captured from 7ce5228; <T> <M> <G>: the tiny models' paths
IDENTITY_V1 = {
    "card cpu": (
        '{"dtype": "float32", "kind": "hf", "model": "meta-llama/Llama-3.1-8B-Instruct", "revision": null}',
        "hf:meta-llama/Llama-3.1-8B-Instruct",
        "hf:meta-llama/Llama-3.1-8B-Instruct",
        None,
    ),
    "card fp16 given": (
        '{"dtype": "float16", "kind": "hf", "model": "meta-llama/Llama-3.1-8B-Instruct", "revision": null}',
        "hf:meta-llama/Llama-3.1-8B-Instruct",
        "hf:meta-llama/Llama-3.1-8B-Instruct",
        None,
    ),
    "gguf": (
        '{"kind": "gguf", "model": "<G>/model.gguf", "revision": "local-5012970adf9dc8ae"}',
        "gguf:<G>/model.gguf",
        "gguf:<G>/model.gguf",
        "gguf:<G>/model.gguf",
    ),
    "gguf len": (
        '{"kind": "gguf", "max_model_len": 2048, "model": "<G>/model.gguf", "revision": "local-5012970adf9dc8ae"}',
        "gguf:<G>/model.gguf",
        "gguf:<G>/model.gguf",
        "gguf:<G>/model.gguf[max_model_len=2048]",
    ),
    "gguf rev": (
        '{"kind": "gguf", "model": "<G>/model.gguf", "revision": "v1"}',
        "gguf:<G>/model.gguf",
        "gguf:<G>/model.gguf",
        "gguf:<G>/model.gguf@v1",
    ),
    "hf": ('{"kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675"}', "hf:<T>", "hf:<T>", "hf:<T>"),
    "hf all": (
        '{"dtype": "float32", "kind": "hf", "max_model_len": 100, "model": "<T>", "quantize": "int8", "revision": "local-7932a4f333d78675", "tokenizer": "<T>"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>[dtype=float32,tokenizer=<T>,max_model_len=100,quantize=int8]",
    ),
    "hf auto": (
        '{"dtype": "auto", "kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>[dtype=auto]",
    ),
    "hf bf16": (
        '{"dtype": "bfloat16", "kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>[dtype=bfloat16]",
    ),
    "hf dbos": (
        '{"double_bos": true, "kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>",
    ),
    "hf fp32": (
        '{"dtype": "float32", "kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>[dtype=float32]",
    ),
    "hf int8": (
        '{"kind": "hf", "model": "<T>", "quantize": "int8", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>[quantize=int8]",
    ),
    "hf kw fp16": (
        '{"dtype": "float16", "kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>",
    ),
    "hf kw fp16+quirks": (
        '{"double_bos": true, "dtype": "float16", "kind": "hf", "max_model_len": 512, "model": "<T>", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>[max_model_len=512]",
    ),
    "hf len": (
        '{"kind": "hf", "max_model_len": 4096, "model": "<T>", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>[max_model_len=4096]",
    ),
    "hf nomask": (
        '{"kind": "hf", "model": "<T>", "no_attention_mask": true, "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>",
    ),
    "hf quirks": (
        '{"double_bos": true, "kind": "hf", "model": "<T>", "no_attention_mask": true, "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>",
    ),
    "hf quirks off": (
        '{"kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>",
    ),
    "hf speed": ('{"kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675"}', "hf:<T>", "hf:<T>", "hf:<T>"),
    "hf tok": (
        '{"kind": "hf", "model": "<T>", "revision": "local-7932a4f333d78675", "tokenizer": "<T>"}',
        "hf:<T>",
        "hf:<T>",
        "hf:<T>[tokenizer=<T>]",
    ),
    "hf@rev": ('{"kind": "hf", "model": "<T>", "revision": "r1"}', "hf:<T>", "hf:<T>", "hf:<T>@r1"),
    "mt5": ('{"kind": "hf", "model": "<M>", "revision": "local-e684f81e98169051"}', "hf:<M>", "hf:<M>", "hf:<M>"),
    "mt5 plain": ('{"kind": "hf", "model": "<M>", "revision": "local-e684f81e98169051"}', "hf:<M>", "hf:<M>", "hf:<M>"),
    "openai": (
        '{"kind": "openai", "model": "gpt-4.1", "revision": null}',
        "openai:gpt-4.1",
        "openai:gpt-4.1",
        "openai:gpt-4.1",
    ),
    "openai chat": (
        '{"api": "chat", "kind": "openai", "model": "gpt-4.1", "revision": null}',
        "openai:gpt-4.1",
        "openai:gpt-4.1",
        "openai:gpt-4.1[api=chat]",
    ),
    "openai completions": (
        '{"api": "completions", "kind": "openai", "max_model_len": 300, "model": "org/tiny", "revision": null, "tokenizer": "<T>"}',
        "openai:org/tiny",
        "openai:org/tiny",
        "openai:org/tiny[tokenizer=<T>,max_model_len=300,api=completions]",
    ),
    "openai endpoint": (
        '{"endpoint": "my-server", "kind": "openai", "model": "m", "revision": null}',
        "openai:m",
        "openai:m",
        "openai:m",
    ),
    "openai len": (
        '{"kind": "openai", "max_model_len": 8192, "model": "m", "revision": null}',
        "openai:m",
        "openai:m",
        "openai:m[max_model_len=8192]",
    ),
    "openai pool": (
        '{"endpoint": "http://a:8000/v1", "kind": "openai", "model": "gpt-4.1", "revision": null}',
        "openai:gpt-4.1",
        "openai:gpt-4.1",
        "openai:gpt-4.1",
    ),
    "openai prefill": (
        '{"kind": "openai", "model": "gpt-4.1", "prefill": true, "revision": null}',
        "openai:gpt-4.1",
        "openai:gpt-4.1",
        "openai:gpt-4.1[prefill=true]",
    ),
    "openai tiktoken": (
        '{"kind": "openai", "model": "gpt-4.1", "revision": null, "tokenizer": "tiktoken:/x/cl100k.tiktoken"}',
        "openai:gpt-4.1",
        "openai:gpt-4.1",
        "openai:gpt-4.1[tokenizer=tiktoken:/x/cl100k.tiktoken]",
    ),
    "openai tok": (
        '{"endpoint": "http://h:8000/v1", "kind": "openai", "model": "org/tiny", "prefill": true, "revision": null, "tokenizer": "<T>"}',
        "openai:org/tiny",
        "openai:org/tiny",
        "openai:org/tiny[prefill=true,tokenizer=<T>]",
    ),
    "openai url": (
        '{"endpoint": "http://host:8000/v1", "kind": "openai", "model": "gpt-4.1", "revision": null}',
        "openai:gpt-4.1",
        "openai:gpt-4.1",
        "openai:gpt-4.1",
    ),
    "ort": (
        '{"block_size": 32, "engine": "onnxruntime-genai 0.18", "kind": "ort", "model": "<T>", "precision": "int4", "revision": "local-7932a4f333d78675"}',
        "ort:<T>",
        "ort:<T>",
        "ort:<T>",
    ),
    "ort fp32": (
        '{"block_size": null, "engine": "onnxruntime-genai 0.18", "kind": "ort", "model": "<T>", "precision": "fp32", "revision": "local-7932a4f333d78675"}',
        "ort:<T>",
        "ort:<T>",
        "ort:<T>[precision=fp32]",
    ),
    "ort int8/64": (
        '{"block_size": 64, "engine": "onnxruntime-genai 0.18", "kind": "ort", "model": "<T>", "precision": "int8", "revision": "local-7932a4f333d78675"}',
        "ort:<T>",
        "ort:<T>",
        "ort:<T>[precision=int8,block_size=64]",
    ),
    "ort len": (
        '{"block_size": 32, "engine": "onnxruntime-genai 0.18", "kind": "ort", "max_model_len": 256, "model": "<T>", "precision": "int4", "revision": "local-7932a4f333d78675"}',
        "ort:<T>",
        "ort:<T>",
        "ort:<T>[max_model_len=256]",
    ),
    "ort standin": (
        '{"block_size": 32, "engine": "onnxruntime-genai 0.18", "kind": "ort", "model": "qwen2.5-coder-0.5b-offline", "precision": "int4", "revision": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}',
        "ort:qwen2.5-coder-0.5b-offline",
        "Qwen2.5-Coder-0.5B (stand-in), ONNX Runtime int4",
        "ort:qwen2.5-coder-0.5b-offline",
    ),
    "ort standin int8": (
        '{"block_size": 32, "engine": "onnxruntime-genai 0.18", "kind": "ort", "model": "qwen2.5-coder-0.5b-offline", "precision": "int8", "revision": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}',
        "ort:qwen2.5-coder-0.5b-offline",
        "Qwen2.5-Coder-0.5B (stand-in), ONNX Runtime int8",
        "ort:qwen2.5-coder-0.5b-offline[precision=int8]",
    ),
    "standin": (
        '{"gguf_file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "kind": "hf", "model": "qwen2.5-coder-0.5b-offline", "revision": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}',
        "hf:qwen2.5-coder-0.5b-offline",
        "Qwen2.5-Coder-0.5B (stand-in)",
        "hf:qwen2.5-coder-0.5b-offline",
    ),
    "standin bf16": (
        '{"dtype": "bfloat16", "gguf_file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "kind": "hf", "model": "qwen2.5-coder-0.5b-offline", "revision": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}',
        "hf:qwen2.5-coder-0.5b-offline",
        "Qwen2.5-Coder-0.5B (stand-in)",
        "hf:qwen2.5-coder-0.5b-offline[dtype=bfloat16]",
    ),
    "standin fp32": (
        '{"dtype": "float32", "gguf_file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "kind": "hf", "model": "qwen2.5-coder-0.5b-offline", "revision": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}',
        "hf:qwen2.5-coder-0.5b-offline",
        "Qwen2.5-Coder-0.5B (stand-in)",
        "hf:qwen2.5-coder-0.5b-offline[dtype=float32]",
    ),
    "standin int8": (
        '{"gguf_file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "kind": "hf", "model": "qwen2.5-coder-0.5b-offline", "quantize": "int8", "revision": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}',
        "hf:qwen2.5-coder-0.5b-offline",
        "Qwen2.5-Coder-0.5B (stand-in)",
        "hf:qwen2.5-coder-0.5b-offline[quantize=int8]",
    ),
    "standin kw bf16": (
        '{"dtype": "bfloat16", "gguf_file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "kind": "hf", "model": "qwen2.5-coder-0.5b-offline", "revision": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}',
        "hf:qwen2.5-coder-0.5b-offline",
        "Qwen2.5-Coder-0.5B (stand-in)",
        "hf:qwen2.5-coder-0.5b-offline",
    ),
    "standin quirks": (
        '{"double_bos": true, "gguf_file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "kind": "hf", "model": "qwen2.5-coder-0.5b-offline", "no_attention_mask": true, "revision": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}',
        "hf:qwen2.5-coder-0.5b-offline",
        "Qwen2.5-Coder-0.5B (stand-in)",
        "hf:qwen2.5-coder-0.5b-offline",
    ),
    "vllm": ('{"kind": "vllm", "model": "<T>", "revision": null}', "vllm:<T>", "vllm:<T>", "vllm:<T>"),
    "vllm opts": (
        '{"dtype": "float16", "kind": "vllm", "max_model_len": 1024, "model": "<T>", "revision": null}',
        "vllm:<T>",
        "vllm:<T>",
        "vllm:<T>[dtype=float16,max_model_len=1024]",
    ),
}


def _cases(T, M, G):
    "(case, spec, keyword options as callers passed them to get_backend) of the table above."
    return [
        ("hf", f"hf:{T}", {}),
        ("hf@rev", f"hf:{T}@r1", {}),
        ("hf bf16", f"hf:{T}[dtype=bfloat16]", {}),
        ("hf fp32", f"hf:{T}[dtype=float32]", {}),
        ("hf auto", f"hf:{T}[dtype=auto]", {}),
        ("hf int8", f"hf:{T}[quantize=int8]", {}),
        ("hf len", f"hf:{T}[max_model_len=4096]", {}),
        ("hf tok", {"spec": f"hf:{T}", "tokenizer": str(T)}, {}),
        (
            "hf all",
            {"spec": f"hf:{T}", "dtype": "float32", "quantize": "int8", "max_model_len": 100, "tokenizer": str(T)},
            {},
        ),
        ("hf speed", {"spec": f"hf:{T}", "device": "cpu", "batch_size": 4, "device_map": "auto"}, {}),
        ("hf quirks", f"hf:{T}", {"double_bos": True, "no_attention_mask": True}),
        ("hf dbos", f"hf:{T}", {"double_bos": True}),
        ("hf nomask", f"hf:{T}", {"no_attention_mask": True}),
        ("hf quirks off", f"hf:{T}", {"double_bos": False, "no_attention_mask": False}),
        ("hf kw fp16", f"hf:{T}", {"dtype": "float16"}),
        ("hf kw fp16+quirks", f"hf:{T}[max_model_len=512]", {"dtype": "float16", "double_bos": True}),
        ("mt5", f"hf:{M}", {"decoder_prefix": "Passage"}),
        ("mt5 plain", f"hf:{M}", {}),
        ("openai", "openai:gpt-4.1", {}),
        ("openai url", {"spec": "openai:gpt-4.1", "base_url": "http://u:p@Host:8000/v1/"}, {}),
        (
            "openai pool",
            {"spec": "openai:gpt-4.1", "base_url": ["http://a:8000/v1", "http://b:8000/v1"], "concurrency": 16},
            {},
        ),
        ("openai prefill", "openai:gpt-4.1[prefill=true]", {}),
        ("openai chat", "openai:gpt-4.1[api=chat]", {}),
        ("openai endpoint", "openai:m[endpoint=my-server,api_key_env=MYKEY]", {}),
        ("openai len", "openai:m[max_model_len=8192]", {}),
        ("openai tiktoken", "openai:gpt-4.1[tokenizer=tiktoken:/x/cl100k.tiktoken]", {}),
        (
            "openai tok",
            {"spec": "openai:org/tiny", "tokenizer": str(T), "base_url": "http://h:8000/v1", "prefill": True},
            {},
        ),
        (
            "openai completions",
            {"spec": "openai:org/tiny", "tokenizer": str(T), "api": "completions", "max_model_len": 300},
            {},
        ),
        ("vllm", f"vllm:{T}", {}),
        (
            "vllm opts",
            {
                "spec": f"vllm:{T}",
                "dtype": "float16",
                "tensor_parallel_size": 2,
                "enable_prefix_caching": True,
                "gpu_memory_utilization": 0.5,
                "batch_size": 64,
                "max_model_len": 1024,
            },
            {},
        ),
        ("gguf", f"gguf:{G}", {}),
        ("gguf len", f"gguf:{G}[max_model_len=2048]", {}),
        ("gguf rev", f"gguf:{G}@v1", {}),
        ("ort", f"ort:{T}", {}),
        ("ort int8/64", f"ort:{T}[precision=int8,block_size=64]", {}),
        ("ort fp32", f"ort:{T}[precision=fp32]", {}),
        ("ort len", f"ort:{T}[max_model_len=256,batch_size=2]", {}),
        ("standin", "hf:qwen2.5-coder-0.5b-offline", {}),
        ("standin int8", "hf:qwen2.5-coder-0.5b-offline[quantize=int8]", {}),
        ("standin bf16", "hf:qwen2.5-coder-0.5b-offline[dtype=bfloat16]", {}),
        ("standin fp32", "hf:qwen2.5-coder-0.5b-offline[dtype=float32]", {}),
        ("standin quirks", "hf:qwen2.5-coder-0.5b-offline", {"double_bos": True, "no_attention_mask": True}),
        ("standin kw bf16", "hf:qwen2.5-coder-0.5b-offline", {"dtype": "bfloat16"}),
        ("ort standin", "ort:qwen2.5-coder-0.5b-offline", {}),
        ("ort standin int8", "ort:qwen2.5-coder-0.5b-offline[precision=int8]", {}),
    ]


TINY_RENDER = [1, 87, 85, 272, 201, 267, 276, 28, 263, 380, 2, 201, 1, 261, 85, 291, 86, 271, 86, 201, 282, 28]
STANDIN_RENDER = [
    151644,
    8948,
    198,
    2610,
    525,
    1207,
    16948,
    11,
    3465,
    553,
    54364,
    14817,
    13,
    1446,
    525,
    264,
    10950,
    17847,
    13,
    151645,
    198,
    151644,
    872,
    198,
    12187,
    424,
    362,
    25,
    279,
    8251,
    151645,
    198,
    151644,
    77091,
    198,
    98475,
    25,
]
PRP = [{"role": "user", "content": "Passage A: the cat"}, {"role": "assistant", "content": " Passage:"}]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    "The tiny models (their bytes are seeded: the same local revision on every machine) and a small file standing for a GGUF."
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("v1")
    G = root / "gguf" / "model.gguf"
    G.parent.mkdir()
    G.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    return tiny_fixture("tiny-qwen2", root), tiny_fixture("tiny-mt5", root), G


def tiny_fixture(name: str, root: Path) -> Path:
    "A copy of a shipped tiny model (tests/fixtures/tiny-models): fixed bytes, so its fingerprint holds on any transformers release."
    return Path(shutil.copytree(Path(__file__).parent / "fixtures" / "tiny-models" / name, root / name))


def test_the_shipped_tiny_models_are_what_make_tiny_hf_model_builds(tmp_path):
    "The fixtures are the models `make_tiny_hf_model` builds (same config and weights) and load with the installed transformers."
    import torch
    from safetensors.torch import load_file

    for name, arch in (("tiny-qwen2", "qwen2"), ("tiny-mt5", "mt5")):
        shipped, built = tiny_fixture(name, tmp_path / "shipped"), make_tiny_hf_model(tmp_path / "built" / name, arch)
        a, b = load_file(shipped / "model.safetensors"), load_file(built / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        keep = lambda c: {k: v for k, v in c.items() if k not in ("transformers_version", "dtype", "torch_dtype")}
        assert keep(json.loads((shipped / "config.json").read_text())) == keep(
            json.loads((built / "config.json").read_text())
        ), name


@pytest.fixture
def engines(monkeypatch):
    "vllm and llama_cpp stand-ins: the backends are built (identity, options) without the optional extras; nothing runs."
    vllm = types.ModuleType("vllm")
    vllm.LLM = object
    lc = types.ModuleType("llama_cpp")

    class Llama:
        def __init__(self, model_path, n_ctx, verbose, **kw):
            self.metadata, self.n_ctx, self.kw = {}, n_ctx, kw

    lc.Llama = Llama
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "llama_cpp", lc)


def _norm(x, T, M, G) -> str:
    s = json.dumps(x, sort_keys=True, default=str)
    return s.replace(str(T.resolve()), "<T>").replace(str(M.resolve()), "<M>").replace(str(G.resolve().parent), "<G>")


def test_spec_keys_are_byte_identical_to_v1():
    for spec, key in KEYS_V1.items():
        s = BackendSpec.parse(json.loads(spec) if spec.startswith("{") else spec)
        assert s.key() == key and str(s) == key, spec
        assert BackendSpec.parse(s.key()).key() == key  # a key parses back to itself


def _check_cases(paths, want_standin: bool):
    T, M, G = paths
    n = 0
    for case, spec, kw in _cases(T, M, G):
        if case.startswith(("standin", "ort standin")) != want_standin:
            continue
        b = get_backend(spec, **kw)
        ident, name, label, key = IDENTITY_V1[case]
        assert _norm(b.identity(), T, M, G) == ident, case
        assert [_norm(x, T, M, G) for x in (b.name, b.label, BackendSpec.parse(spec).key())] == [
            json.dumps(x) for x in (name, label, key)
        ], case
        if case.startswith(("hf", "standin")):
            assert b._render(PRP)["ids"] == (STANDIN_RENDER if want_standin else TINY_RENDER), case
        n += 1
    return n


def test_backend_identities_are_byte_identical_to_v1(paths, engines, monkeypatch):
    "hf (dtype, quantize, max_model_len, tokenizer; quirks the old way), openai, vllm, gguf and ort, on tiny models."
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert _check_cases(paths, want_standin=False) == 37  # + 8 stand-in cases (slow) + 2 model-table cases = 47


def test_the_quirks_the_new_way_give_the_old_identity(paths):
    "Quirks laid over by `with_options` or `HFOptions.paper` give the identity they had as constructor keywords."
    from clir_llm.llm_hf import HFOptions

    T, M, G = paths
    old = IDENTITY_V1["hf quirks"][0]
    spec = BackendSpec.parse(f"hf:{T}")
    assert _norm(spec.with_options(double_bos=True, no_attention_mask=True).build().identity(), T, M, G) == old
    assert _norm(spec.build(**HFOptions.paper(upstream="llm-rankers").non_default()).identity(), T, M, G) == old
    assert spec.with_options(double_bos=True).key() == spec.key() == f"hf:{T}"  # quirks never name the spec


def test_model_table_identity_is_byte_identical_to_v1(paths, monkeypatch):
    import torch, transformers
    from clir_llm.llm_hf import HFBackend

    T, M, G = paths
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    m, tok = transformers.AutoModelForCausalLM.from_pretrained(T), transformers.AutoTokenizer.from_pretrained(T)
    for case, kw in (("card cpu", {}), ("card fp16 given", {"dtype": "float16"})):
        b = HFBackend.create("meta-llama/Llama-3.1-8B-Instruct", hf_model=m, hf_tokenizer=tok, **kw)
        assert _norm(b.identity(), T, M, G) == IDENTITY_V1[case][0] and b.name == IDENTITY_V1[case][1]


@pytest.mark.slow
def test_offline_stand_in_identities_are_byte_identical_to_v1(paths):
    "The offline stand-in (hf: and ort:) is prepared under the cache root first: minutes when it is not there yet."
    assert _check_cases(paths, want_standin=True) == 8


# ---------------------------------------------------------------- one registry, each kind in its own module
class EchoBackend(Backend):
    "Answers each prompt with itself."

    kind = "echo"

    def __init__(self, model: str, options=None, cache=None, revision=None):
        self.model, self.options, self.revision = model, options, revision

    def generate(self, prompts, max_new_tokens=128, on_error="raise", **params):
        self.usage.calls += len(prompts)
        return [str(p)[:max_new_tokens] for p in prompts]


@pytest.fixture
def echo():
    BACKENDS.register("echo:", EchoBackend, example="echo:<anything>")
    yield
    BACKENDS._items.pop("echo:", None)


def test_each_kind_registers_from_its_own_module():
    mods = {e.name: e.obj.__module__ for e in BACKENDS.entries()}
    assert mods == {
        "hf:": "clir_llm.llm_hf",
        "openai:": "clir_llm.llm_openai",
        "vllm:": "clir_llm.llm_vllm",
        "gguf:": "clir_llm.llm_gguf",
        "ort:": "clir_llm.llm_ort",
        "ce:hf:": "clir_llm.crossencoder",
    }
    assert all(mods[k] in BACKENDS.plugins for k in mods)


def test_a_new_kind_is_built_described_and_listed(echo):
    b = get_backend("echo:x")
    assert isinstance(b, EchoBackend) and b.name == "echo:x" and b.generate(["hi", "there"]) == ["hi", "there"]
    assert b.usage.calls == 2 and b.count_tokens("a b c") == 3 and b.truncate("a b c", 2) == "a b"
    assert BackendSpec.parse("echo:x").describe() == "EchoBackend model x" and get_backend("echo:x@v2").revision == "v2"
    assert b.identity() == {"kind": "echo", "model": "x", "revision": None}
    with pytest.raises(ClirError, match="echo:<anything>"):
        get_backend("nope:x")  # the error lists the new kind
    with pytest.raises(ClirError, match=r"llm: echo: does not take option dtype \(it takes: none\)"):
        BackendSpec.parse("echo:x[dtype=x]")
    with pytest.raises(LLMError, match="supports_logprobs is False"):
        b.score(["p"], ["A", "B"])


def test_a_class_without_generate_is_refused_at_registration():
    class Mute(Backend):
        supports_logprobs = True

    with pytest.raises(ClirError, match="Mute does not implement generate"):
        BACKENDS.register("mute:", Mute)
    with pytest.raises(ClirError, match="must subclass clir_llm.llm.Backend"):
        BACKENDS.register("mute:", object)
    assert "mute:" not in BACKENDS.names()


def test_a_new_kind_appears_in_the_dry_run_plan(echo, tmp_path):
    "Issue 13: a backend kind registered at run time is described by the dry run (the old plan raised KeyError)."
    from clir_llm.config import load_config
    from clir_llm.plan import plan

    cfg = dict(
        name="t",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        experiments=["1_first_stage"],
        first_stage=dict(methods=["bm25-og"]),
        rerankers=[dict(name="Echo", llm="echo:x", method="listwise", first_stages=["bm25-og"])],
    )
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    lines = plan(load_config(tmp_path / "c.yaml"))
    assert any(l.startswith("reranker Echo: listwise with echo:x = EchoBackend model x") for l in lines), lines


def test_spec_parsed_once_keeps_todays_names():
    for s in [
        "hf:qwen2.5-coder-0.5b-offline",
        "openai:gpt-4.1",
        "vllm:meta-llama/Llama-3.1-8B-Instruct",
        "gguf:/m/q.gguf",
    ]:
        spec = BackendSpec.parse(s)
        assert (
            spec.key() == s
            and spec.revision is None
            and BackendSpec.parse(spec) is spec
            and BackendSpec.parse({"spec": s}).key() == s
        )
    spec = BackendSpec.parse("hf:castorini/rank_zephyr_7b_v1_full@abc123")
    assert (spec.kind, spec.model, spec.revision) == ("hf", "castorini/rank_zephyr_7b_v1_full", "abc123")
    # an @ inside a path is not a revision
    assert BackendSpec.parse("gguf:/models/a@b/x.gguf").model == "/models/a@b/x.gguf"
    for bad in ["llama", "hf:", "bert:x", ""]:
        with pytest.raises(
            ClirError,
            match="LLM backend spec must be one of hf:<model>, openai:<model>, vllm:<model>, gguf:<model>, ort:<model>",
        ):
            BackendSpec.parse(bad)


def test_builtin_descriptions_unchanged():
    d = lambda s: BackendSpec.parse(s).describe()
    assert d("hf:qwen2.5-coder-0.5b-offline") == "Qwen2.5-Coder-0.5B (stand-in) via transformers (offline GGUF)"
    assert d("openai:gpt-4.1") == "OpenAI chat API gpt-4.1 ($2.0/$8.0 per M tokens in/out, prices of 2025-06-01)"
    assert d("openai:foo") == "OpenAI chat API foo (no price in the table: cost reported as 0)"
    assert d("hf:castorini/rank_zephyr_7b_v1_full").startswith(
        "transformers model castorini/rank_zephyr_7b_v1_full (float16"
    )
    assert d("hf:org/other-model") == "transformers model org/other-model"
    assert d("vllm:x/y") == "vLLM (GPU extra) model x/y" and d("gguf:/a.gguf") == "llama.cpp model /a.gguf"
    assert (
        d({"spec": "vllm:x/y", "tensor_parallel_size": 2, "dtype": "float16"})
        == "vLLM (GPU extra) model x/y (dtype=float16, tensor_parallel_size=2)"
    )


def test_capability_flags_per_kind():
    "What the planner and the rerankers read instead of kind strings."
    flags = {e.name: (e.obj.is_api, e.obj.local_model, e.obj.throughput_engine) for e in BACKENDS.entries()}
    assert flags == {
        "hf:": (False, True, "hf"),
        "openai:": (True, False, None),
        "vllm:": (False, True, "serving"),
        "gguf:": (False, True, "hf"),
        "ort:": (False, True, None),
        "ce:hf:": (False, True, "serving"),
    }
    for e in BACKENDS.entries():
        for flag in (
            "supports_logprobs",
            "supports_batching",
            "is_chat",
            "is_encoder_decoder",
            "supports_prefill",
            "scores_sequences",
            "is_api",
            "local_model",
        ):
            assert isinstance(getattr(e.obj, flag), bool), (e.name, flag)
        assert issubclass(e.obj.Options, BackendOptions) and e.obj.Options is not BackendOptions
    price = {e.name: e.obj.price("gpt-4.1") for e in BACKENDS.entries()}
    assert price == {
        "hf:": None,
        "openai:": {"input": 2.0, "output": 8.0},
        "vllm:": None,
        "gguf:": None,
        "ort:": None,
        "ce:hf:": None,
    }


def test_hub_models_and_what_a_run_misses(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    hub = lambda s: kind_class(s).hub_models(BackendSpec.parse(s))
    miss = lambda s: kind_class(s).missing(BackendSpec.parse(s))
    assert hub("hf:meta-llama/Llama-3.1-8B-Instruct[tokenizer=org/tok]") == [
        "meta-llama/Llama-3.1-8B-Instruct",
        "org/tok",
    ]
    assert hub("vllm:castorini/rank_zephyr_7b_v1_full") == ["castorini/rank_zephyr_7b_v1_full"]
    assert (
        hub("hf:qwen2.5-coder-0.5b-offline")
        == hub(f"hf:{tmp_path}")
        == hub("openai:gpt-4.1")
        == hub("ort:qwen2.5-coder-0.5b-offline")
        == []
    )
    assert hub("openai:meta-llama/Llama-3.1-8B-Instruct[base_url=http://h:8000/v1]") == [
        "meta-llama/Llama-3.1-8B-Instruct"
    ]
    assert (
        miss("openai:gpt-4.1") == ["credentials: OPENAI_API_KEY is unset"]
        and miss("openai:x[base_url=http://h/v1]") == []
    )
    assert miss("openai:x[base_url=http://h/v1,api_key_env=MY_KEY_VAR]") == ["credentials: MY_KEY_VAR is unset"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert miss("openai:gpt-4.1") == []
    assert miss("gguf:/no/such.gguf") == ["files: no such GGUF file '/no/such.gguf'"] and miss("hf:/no/such") == [
        "files: no such model folder '/no/such'"
    ]
    assert miss("hf:meta-llama/Llama-3.1-8B-Instruct") == miss("ort:qwen2.5-coder-0.5b-offline") == [] and miss(
        "ort:/no/dir"
    )


# ---------------------------------------------------------------- options live with their kind
def test_each_kind_takes_only_its_own_options():
    assert BackendSpec.parse("ort:/m/q[precision=int8,block_size=64]").options.block_size == 64
    for spec, msg in [
        (
            {"spec": "hf:x", "tensor_parallel_size": 2},
            "llm: hf: does not take option tensor_parallel_size (it takes: dtype, ",
        ),
        ({"spec": "openai:x", "dtype": "bfloat16"}, "llm: openai: does not take option dtype"),
        ("hf:/m/q[precision=int4]", "hf: does not take option precision"),
        ("ort:/m/q[dtype=bfloat16]", "ort: does not take option dtype"),
        ({"spec": "hf:x", "dtype": "fp8"}, "dtype"),
        ({"base_url": "x"}, "needs 'spec'"),
        ("hf:x[batch_size]", "not key=value"),
        ({"spec": "vllm:x", "gpu_memory_utilization": 2}, "gpu_memory_utilization"),
        ("ort:/m/q[precision=int3]", "precision"),
        ("hf:x[dtype=float16,dtype=bfloat16]", "option 'dtype' is given twice"),
    ]:
        with pytest.raises(ClirError) as e:
            BackendSpec.parse(spec)
        assert msg in str(e.value) and "\n" not in str(e.value), (spec, str(e.value))


def test_speed_options_do_not_name_runs_output_options_do():
    base = BackendSpec.parse("vllm:meta-llama/Llama-3.1-8B-Instruct")
    fast = BackendSpec.parse(
        {
            "spec": str(base),
            "tensor_parallel_size": 2,
            "enable_prefix_caching": True,
            "gpu_memory_utilization": 0.9,
            "batch_size": 512,
        }
    )
    assert fast.key() == base.key() and fast.options.tensor_parallel_size == 2 and base.options.batch_size == 256
    other = BackendSpec.parse({"spec": str(base), "dtype": "float16", "max_model_len": 8192, "tokenizer": "t/t"})
    assert other.key() == "vllm:meta-llama/Llama-3.1-8B-Instruct[dtype=float16,tokenizer=t/t,max_model_len=8192]"
    assert (
        BackendSpec.parse(other.key()) == BackendSpec.parse(other.key()).model_copy()
        and BackendSpec.parse(other.key()).key() == other.key()
    )
    pool = BackendSpec.parse(
        {
            "spec": "openai:m/x",
            "base_url": ["http://a/v1", "http://b/v1"],
            "concurrency": 16,
            "api_key_env": "MY_KEY",
            "prefill": True,
        }
    )
    assert pool.key() == "openai:m/x[prefill=true]" and pool.options.base_url == ["http://a/v1", "http://b/v1"]
    # a default given is named, as before
    assert BackendSpec.parse("openai:m[prefill=false]").key() == "openai:m[prefill=false]"


def test_with_options_lays_over_without_renaming(tmp_path):
    s = BackendSpec.parse("hf:org/m[dtype=bfloat16,batch_size=4]")
    w = s.with_options(double_bos=True, no_attention_mask=True, device="cuda", batch_size=2)
    assert (
        w.options.quirks.double_bos,
        w.options.quirks.no_attention_mask,
        w.options.device,
        w.options.batch_size,
    ) == (True, True, "cuda", 2)
    assert w.key() == s.key() == "hf:org/m[dtype=bfloat16]" and s.given() == {"dtype": "bfloat16", "batch_size": 4}
    assert w.given() == {"dtype": "bfloat16", "batch_size": 2}  # given names, their values now
    # a laid output option does not rename the spec either
    assert s.with_options(max_model_len=512).key() == s.key()
    # parse: given
    assert BackendSpec.parse(s, max_model_len=512).key() == "hf:org/m[dtype=bfloat16,max_model_len=512]"
    with pytest.raises(ClirError, match="openai: does not take option double_bos"):
        BackendSpec.parse("openai:x").with_options(double_bos=True)
    assert s.with_options() is s


def test_options_helpers_identity_v1():
    class Toy(BackendOptions):
        dtype: str | None = opt(None, "weights")
        batch_size: int = opt(8, "batch", identity=False)
        extra: str = opt("a", "a newer output option")

    o = Toy.from_flat({"batch_size": 4, "extra": "b", "dtype": "x"})
    assert given_names(o) == ["dtype", "batch_size", "extra"] and output_options(o) == {"dtype": "x", "extra": "b"}
    laid = lay_over(Toy(), dtype="y")
    assert laid.dtype == "y" and given_names(laid) == [] and output_options(laid) == {}
    with pytest.raises(ClirError, match="does not take option nope"):
        lay_over(Toy(), nope=1)


def test_a_spec_is_a_value(tmp_path):
    s = BackendSpec.parse("hf:org/m[dtype=bfloat16]")
    assert BackendSpec(kind="hf", model="org/m").options == kind_class("hf:").Options()
    assert BackendSpec.model_validate(json.loads(s.model_dump_json())).options == s.options
    assert pickle.loads(pickle.dumps(s)).key() == s.key() and hash(s) == hash(
        BackendSpec.parse("hf:org/m[dtype=bfloat16]")
    )
    with pytest.raises(ClirError, match="options must be HFOptions"):
        from clir_llm.specs import validated

        validated(BackendSpec, {"kind": "hf", "model": "x", "options": kind_class("openai:").Options()}, where="llm")


def test_config_llm_with_options_keeps_the_demo_run_names(tmp_path):
    from clir_llm.config import load_config

    rerank_params = lambda r: r.run_identity()
    data = yaml.safe_load((ROOT / "configs/demo.yaml").read_text())
    before = [rerank_params(r) for r in load_config(ROOT / "configs/demo.yaml").rerankers]
    for r in data["rerankers"]:
        r["llm"] = {"spec": r["llm"], "batch_size": 2, "device": "cpu"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "regression").mkdir()
    cfg = load_config(tmp_path / "c.yaml")
    assert [rerank_params(r) for r in cfg.rerankers] == before and cfg.rerankers[0].llm.options.batch_size == 2
    data["rerankers"][0]["llm"]["dtype"] = "bfloat16"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    # an output option names new runs
    assert rerank_params(load_config(tmp_path / "c.yaml").rerankers[0]) != before[0]
    data["rerankers"][0]["llm"]["concurrency"] = 4
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ClirError, match="hf: does not take option concurrency"):
        load_config(tmp_path / "c.yaml")


# ---------------------------------------------------------------- options on the command line, generated per kind
def _flags(help_text: str) -> set[str]:
    import re

    return set(re.findall(r"--llm-[a-z0-9-]+", help_text)) - {"--llm-option"}


def test_help_of_each_kind_lists_only_its_own_options():
    every = {
        e.name[:-1]: {"--llm-" + n.replace("_", "-") for n in e.obj.Options.flat_fields()} for e in BACKENDS.entries()
    }
    for kind, own in every.items():
        ap = add_backend_arguments(argparse.ArgumentParser(prog="clir-llm rerank"), f"{kind}:some/model")
        got = _flags(ap.format_help())
        assert got == own, (kind, got ^ own)
        others = set().union(*(v for k, v in every.items() if k != kind)) - own
        assert not got & others and f"({kind}:)" in ap.format_help()
    hf_help = add_backend_arguments(argparse.ArgumentParser(), "hf:x").format_help()
    assert "--llm-double-bos" in hf_help and "--llm-concurrency" not in hf_help and "(default 8)" in hf_help
    # no --llm: all
    assert _flags(add_backend_arguments(argparse.ArgumentParser()).format_help()) == set().union(*every.values())


def test_cli_llm_options_build_the_spec():
    argv = [
        "--llm",
        "openai:m/x",
        "--llm-option",
        "concurrency=8",
        "--llm-base-url",
        "http://a/v1,http://b/v1",
        "--llm-tokenizer",
        "t/t",
    ]
    ap = add_backend_arguments(argparse.ArgumentParser(), llm_of_argv(argv))
    ap.add_argument("--llm")
    s = backend_spec_from_args(ap.parse_args(argv))
    assert (s.options.concurrency, s.options.base_url, s.options.tokenizer, s.key()) == (
        8,
        ["http://a/v1", "http://b/v1"],
        "t/t",
        "openai:m/x[tokenizer=t/t]",
    )
    with pytest.raises(ClirError, match="need --llm"):
        backend_spec_from_args(ap.parse_args(argv[2:]), None)
    with pytest.raises(ClirError, match="KEY=VALUE"):
        backend_spec_from_args(ap.parse_args(["--llm-option", "x"]), "hf:x")
    with pytest.raises(ClirError, match="hf: does not take option concurrency"):
        backend_spec_from_args(ap.parse_args(argv[2:4]), "hf:x")
    hf = add_backend_arguments(argparse.ArgumentParser(), "hf:x")
    s = backend_spec_from_args(
        hf.parse_args(["--llm-double-bos", "--llm-dtype", "bfloat16", "--llm-batch-size", "2"]), "hf:x"
    )
    assert s.options.quirks.double_bos and s.key() == "hf:x[dtype=bfloat16]" and s.options.batch_size == 2
    assert backend_spec_from_args(hf.parse_args([]), None) is None and llm_of_argv(["--method", "x"]) is None
    with pytest.raises(SystemExit):
        hf.parse_args(["--llm-concurrency", "3"])  # not an hf: flag


# ---------------------------------------------------------------- the cached, batched machinery
class _Opts(BackendOptions):
    batch_size: int = opt(2, "prompts per batch", identity=False)


class Reverse(CachedBackend):
    "A toy model: the prompt reversed (batches recorded)."

    kind, Options = "reverse", _Opts

    def _render(self, prompt):
        return {"text": plain_text(prompt)}

    def _generate_batch(self, items, params):
        return [
            {"text": it["text"][::-1][: params["max_new_tokens"]], "tokens_in": len(it["text"]), "tokens_out": 1}
            for it in items
        ]


class Recording(LocalExecutor):
    "Two workers' worth of batches per group, computed here; every call recorded."

    workers = 2

    def __init__(self):
        self.calls = []

    def map(self, owner, method, calls):
        self.calls.append((method, [len(c[0]) for c in calls]))
        return super().map(owner, method, calls)


def test_batches_go_through_the_executor_group_by_group(tmp_path):
    prompts = ["abc", "de", "fgh", "ij", "k", "de"]
    local = Reverse("toy", cache=Cache(tmp_path / "l"))
    ex = Recording()
    grouped = Reverse("toy", cache=Cache(tmp_path / "g"), executor=ex)
    assert local.executor is LOCAL and grouped.generate(prompts, progress=False) == local.generate(
        prompts, progress=False
    )
    assert ex.calls == [("_generate_batch", [2, 2]), ("_generate_batch", [1])]  # 5 distinct prompts, batches of 2
    rows = lambda c: [(r["key"], r["value"], r["meta"]) for r in c.export_entries("llm")]
    assert rows(Cache(tmp_path / "g")) == rows(Cache(tmp_path / "l")) and grouped.usage.calls == local.usage.calls == 5
    with pytest.raises(ClirError, match="on_error"):
        local.generate(["x"], on_error="ignore")


def test_call_key_is_the_cache_key(tmp_path):
    b = Reverse("toy", cache=Cache(tmp_path))
    b.generate(["abc"], max_new_tokens=4, progress=False)
    (row,) = Cache(tmp_path).export_entries("llm")
    assert call_key(b, "generate", b._params(4, {}), "abc") == row["key"]


def test_the_worker_recipe_rebuilds_an_equivalent_backend_with_the_cache_off(tmp_path):
    BACKENDS.register("reverse:", Reverse, example="reverse:<x>")
    try:
        b = get_backend("reverse:toy", Cache(tmp_path), batch_size=3)
        factory, args = pickle.loads(pickle.dumps(b.worker()))
        w = factory(*args)
        assert (
            factory is rebuild_backend and isinstance(w, Reverse) and w.identity() == b.identity() and w.batch_size == 3
        )
        assert w.cache.mode == "off" and w.cache.root == Cache(tmp_path).root
    finally:
        BACKENDS._items.pop("reverse:", None)


# ---------- reliability (issue 14; moved from the test_reliability_* files)
def test_backend_option_errors_name_the_option_without_pydantic_prefixes():
    "A bad backend option is one line naming the option and the value: no 'Value error,' prefix, no dumped input dict."
    from clir_llm.llm import BackendSpec

    for bad, says in (
        ({"spec": "openai:x", "base_url": "ftp://host/v1"}, "llm: base_url: not an http:// or https:// URL"),
        (
            {"spec": "openai:x", "base_url": "http://a:8000/v1,localhost:8001"},
            "'localhost:8001' is not an http:// or https:// URL",
        ),
        ("hf:qwen[tensor_parallel_size=2]", "llm: hf: does not take option tensor_parallel_size (it takes: dtype,"),
    ):
        with pytest.raises(ClirError) as e:
            BackendSpec.parse(bad)
        R.hostile("arguments", "bad backend option", says in str(e.value) and "Value error" not in str(e.value))
        assert says in str(e.value) and "Value error" not in str(e.value) and "'kind'" not in str(e.value), str(e.value)


# ---------- finding 11: a fully cached rerank spends nothing now; --sort-k 0 refused
def test_cached_rerank_reports_work_done_now(tmp_path):
    from clir_llm.cache import Cache
    from clir_llm.collections import load_collection
    from clir_llm.llm import get_backend
    from clir_llm.rerank import get_reranker

    coll = load_collection("fixture", "en-de")
    run = Run.read(R.good_run(tmp_path, "in.trec"))
    with FakeOpenAIServer(responder=R.slow_answer(0.3)) as srv:
        usages = []
        for _ in range(2):
            b = get_backend("openai:gpt-4.1", cache=Cache(tmp_path / "cache"), base_url=srv.url, concurrency=1)
            rr = get_reranker("listwise-rankzephyr", b, window=2, step=1, progress=False)
            rr.rerank(coll, run, k=2)
            usages.append(rr.usage)
    cold, warm = usages
    assert cold.calls > 0 and cold.cost_usd > 0 and cold.seconds >= 0.3 * cold.calls
    assert warm.calls == 0 and warm.cache_hits == cold.calls and warm.cost_usd == 0 and warm.tokens_in == 0
    assert warm.seconds < 0.3, warm.seconds  # not the recorded 0.3 s per call
    assert abs(warm.counters["cached_usd"] - cold.cost_usd) < 1e-12  # what the hits would have cost, kept apart
    assert warm.counters["cached_seconds"] >= 0.3 * cold.calls and warm.counters["cached_tokens_in"] == cold.tokens_in


def test_an_option_given_twice_in_a_backend_spec_is_refused(tmp_path):
    "issue 26 item 11: `hf:x[dtype=a,dtype=b]` was read with the last value winning; now one line naming the option."
    p = R.run_main(
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        R.good_run(tmp_path),
        "--method",
        "listwise",
        "--llm",
        "hf:x[dtype=float32,dtype=bfloat16]",
        "--out",
        tmp_path / "o.trec",
    )
    R.expect_one_line_error("llm option given twice", p, "arguments", "option 'dtype' is given twice")


@pytest.mark.parametrize(
    "bad",
    [
        "null",
        "[1, 2]",
        "{}",
        '{"text": 5}',
        '{"text": "x", "tokens_in": "many"}',
        '{"text": "x", "seconds": "s"}',
        '{"text": "x", "tokens_out": -3}',
    ],
)
def test_a_cache_row_of_the_wrong_shape_is_a_counted_miss(tmp_path, bad):
    """A stored call record that is valid JSON of the wrong shape (planted by hand or by a recorded: file, issue 39 item 5)
    is asked again and counted (bad_cache_rows), never a traceback (was AttributeError, KeyError, ValueError)."""
    import sqlite3

    Reverse("toy", cache=Cache(tmp_path)).generate(["hello"], progress=False)
    with sqlite3.connect(tmp_path / "llm.sqlite") as con:
        con.execute("UPDATE entries SET value = ?", (bad.encode(),))
    b = Reverse("toy", cache=Cache(tmp_path))
    try:
        out, ok = b.generate(["hello"], progress=False), True
    except Exception as e:
        out, ok = repr(e), False  # noqa: BLE001 - the bug the test is about
    R.hostile("input files", f"a cache row of the wrong shape ({bad[:20]})", ok and out == ["olleh"])
    assert out == ["olleh"] and b.usage.calls == 1 and b.usage.counters.get("bad_cache_rows") == 1, (out, b.usage)
    # stored again, well-formed
    assert Reverse("toy", cache=Cache(tmp_path)).generate(["hello"], progress=False) == ["olleh"]
