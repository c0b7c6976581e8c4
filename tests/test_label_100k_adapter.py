"""benchmarks/gpu/label_100k's adapter: the cold-started judge's LoRA adapter is rounded to int8 before the merge, so
what a later session (a fresh box) rebuilds from the committed int8 file is the very judge that labelled."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from conftest import load_script

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "label_100k" / "label_100k.py"


@pytest.fixture(scope="module")
def mod():
    return load_script(SCRIPT, "label_100k_adapter")


def _trained_lora(base):
    """A tiny Qwen2 with a LoRA adapter whose B matrices are not zero (as after training)."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"],
                                                           task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model


@pytest.fixture(scope="module")
def base():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2))


def test_the_rebuilt_judge_is_the_judge_that_labelled(mod, base, tmp_path):
    from peft import PeftModel

    model = _trained_lora(base)
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    adapter = tmp_path / "adapter"
    with mod.keep_adapter(adapter):
        judge = model.merge_and_unload()  # what teacher_sft calls
    assert not (adapter / "adapter_model.safetensors").exists()  # only the int8 file travels
    from safetensors.torch import load_file

    stored = load_file(adapter / mod.ADAPTER_FILE)
    qs = [t for n, t in stored.items() if n.endswith(".q")]
    assert qs and all(t.dtype == torch.int8 for t in qs)
    n_lora = sum(t.numel() for t in trained.values())
    assert sum(t.numel() for t in qs) == n_lora
    assert (adapter / mod.ADAPTER_FILE).stat().st_size < 1.1 * n_lora + 20_000  # ~1 byte a parameter

    # a later session: the same base, the carried file, merged as rebuild_judge merges it
    carried = tmp_path / "carried"
    carried.mkdir()
    (carried / "adapter_config.json").write_bytes((adapter / "adapter_config.json").read_bytes())
    (carried / mod.ADAPTER_FILE).write_bytes((adapter / mod.ADAPTER_FILE).read_bytes())
    from safetensors.torch import save_file

    save_file(mod.expand_adapter(carried / mod.ADAPTER_FILE), carried / "adapter_model.safetensors")
    again = PeftModel.from_pretrained(copy.deepcopy(base), carried).merge_and_unload()
    a, b = judge.state_dict(), again.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)

    # and the int8 adapter is the trained one within half a step of its rank index's scale
    expanded = mod.expand_adapter(adapter / mod.ADAPTER_FILE)
    for name, w in trained.items():
        key = name.replace(".default", "")
        step = stored[key + ".scale"]
        assert torch.all((expanded[key] - w).abs() <= step / 2 + 1e-9), name
        assert not torch.equal(expanded[key], w)  # rounded: the merged judge is not the fp32 one
