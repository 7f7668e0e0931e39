"""Contract 6: specwatch.aux_layers equals the real `set_eagle3_layers_to_capture` of each model
class, called on an object of that class built without its weights (`object.__new__` + the
attributes the method reads: `pp_group`, `config.num_hidden_layers`, `model`)."""
from __future__ import annotations

import importlib
import inspect
import itertools
from types import SimpleNamespace

import pytest
import torch.nn as nn

from specwatch import aux_layers

from .conftest import SGLANG_VERSION

ID_LISTS = [[-1, 2, 30], [2, 30, 58], [1, 29, 57], [1, 30, 60], [0, 1, 2], [3, 31, 61],
            [1], [5, 1, 9], [60, 61, 59], [-1, 0, 1]]
LAYERS = [61, 62, 4, 32]


class _Inner:
    """Stands for `self.model` (a decoder stack); records what it is told to capture."""

    def __init__(self):
        self.layers_to_capture = []

    def set_eagle3_layers_to_capture(self, ids):  # Qwen3Moe delegates to its model
        self.layers_to_capture = list(ids)


def real_capture(cls, ids, num_layers) -> list[int]:
    obj = cls.__new__(cls)
    nn.Module.__init__(obj)
    obj.pp_group = SimpleNamespace(is_last_rank=True)
    obj.config = SimpleNamespace(num_hidden_layers=num_layers)
    obj.model = _Inner()
    if cls.__name__ == "KimiK25ForConditionalGeneration":
        from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
        inner = DeepseekV3ForCausalLM.__new__(DeepseekV3ForCausalLM)
        nn.Module.__init__(inner)
        inner.pp_group, inner.config, inner.model = obj.pp_group, obj.config, _Inner()
        obj.language_model = inner
        cls.set_eagle3_layers_to_capture(obj, list(ids))
        return list(inner.model.layers_to_capture)
    cls.set_eagle3_layers_to_capture(obj, list(ids))
    return list(obj.model.layers_to_capture)


def model_class(arch: str):
    mod = importlib.import_module(f"sglang.srt.models.{aux_layers.MODULES[arch]}")
    return getattr(mod, arch)


@pytest.mark.parametrize("arch", sorted(aux_layers.rules_for(SGLANG_VERSION)[1]))
def test_rule_equals_the_real_set_eagle3_layers_to_capture(arch):
    used, table = aux_layers.rules_for(SGLANG_VERSION)
    assert used == SGLANG_VERSION, f"no rule table for sglang {SGLANG_VERSION}: add one"
    cls = model_class(arch)
    for ids, L in itertools.product(ID_LISTS, LAYERS):
        assert aux_layers.capture_indices(table[arch], ids, L) == real_capture(cls, ids, L), \
            (arch, ids, L)


def test_issue_deployment_deepseek_vs_llama():
    """61-layer target: [2, 30, 58] on DeepseekV3 captures indices 2, 30, 58 (SGLang's default
    capture), [-1, 2, 30] captures only two states; on Llama every id is shifted by one."""
    ds, ll = model_class("DeepseekV3ForCausalLM"), model_class("LlamaForCausalLM")
    assert real_capture(ds, [2, 30, 58], 61) == [2, 30, 58]
    assert real_capture(ds, [-1, 2, 30], 61) == [-1, 2, 30]
    assert aux_layers.captured_outputs(aux_layers.rule("DeepseekV3ForCausalLM"), [-1, 2, 30], 61) \
        == [None, 1, 29]
    assert real_capture(ll, [2, 30, 58], 61) == [3, 31, 59]
    assert aux_layers.captured_outputs(aux_layers.rule("LlamaForCausalLM"), [2, 30, 58], 61) \
        == [2, 30, 58]


def test_capture_index_means_the_input_of_that_layer():
    """The forward loops capture at index i while running layer i (its input = output of layer
    i-1), and only for indices the loop reaches; gpt-oss also captures index end_layer after the
    final norm. Read from the real forward source, since a forward needs the weights."""
    for arch in ("LlamaForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeLiteForCausalLM"):
        cls = model_class(arch)
        inner = importlib.import_module(cls.__module__)
        src = inspect.getsource(inner)
        assert "if i in self.layers_to_capture" in src, arch
    src = inspect.getsource(importlib.import_module(model_class("GptOssForCausalLM").__module__))
    assert "if self.end_layer in self.layers_to_capture" in src
    r = aux_layers.PLUS_ONE_UNLESS_MAX_IS_L
    assert aux_layers.captured_outputs(r, [1, 30, 61], 61) == [0, 29, 60]


def test_every_class_with_the_method_is_in_the_table_or_unknown():
    """Model modules of the rule table: each class defining its own set_eagle3_layers_to_capture
    is either in the table, or aux_layers says it does not know it (never a guess)."""
    table = aux_layers.rules_for(SGLANG_VERSION)[1]
    for modname in sorted(set(aux_layers.MODULES.values())):
        mod = importlib.import_module(f"sglang.srt.models.{modname}")
        for name, cls in vars(mod).items():
            if isinstance(cls, type) and cls.__module__ == mod.__name__ and \
                    "set_eagle3_layers_to_capture" in vars(cls):
                if name in table:
                    continue
                assert aux_layers.rule(name, SGLANG_VERSION) is None
                assert set(aux_layers.read(name, [1, 2, 3], 10)) == set(aux_layers.RULE_TEXT)


def test_ids_for_outputs_inverts_the_rule():
    for name in aux_layers.RULE_TEXT:
        for ids, L in itertools.product(ID_LISTS, LAYERS):
            outs = aux_layers.captured_outputs(name, ids, L)
            if None in outs:
                continue
            back = aux_layers.ids_for_outputs(name, outs, L)
            assert back is not None and aux_layers.captured_outputs(name, back, L) == outs
