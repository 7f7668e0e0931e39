"""specwatch's rule for which layers vLLM's EAGLE-3 aux ids capture (aux_layers.AS_GIVEN),
checked against the installed vLLM: its real `EagleModelMixin._maybe_add_hidden_state` is driven
through the capture points each verified model's forward calls it at (read from that forward's
source: the start layer before the first layer, idx + 1 after layer idx), and what it appends
must be what aux_layers says each id captures."""
from __future__ import annotations

import importlib
import inspect
import re
import types

import pytest

from specwatch import aux_layers


@pytest.mark.parametrize("arch", sorted(aux_layers.VLLM_RULES["0.32.0"]))
@pytest.mark.parametrize("layers,ids", [(4, [0, 1, 2]), (32, [1, 15, 28]), (32, [2, 16, 29]),
                                        (8, [0, 8]), (8, [-1, 3, 9])])
def test_vllms_capture_loop_feeds_the_layers_aux_layers_says(arch, layers, ids):
    from vllm.model_executor.models.interfaces import EagleModelMixin
    module = importlib.import_module(
        f"vllm.model_executor.models.{aux_layers.VLLM_MODULES[arch]}")
    model_cls = next(c for n, c in vars(module).items() if isinstance(c, type)
                     and issubclass(c, EagleModelMixin) and n.endswith("Model")
                     and "forward" in vars(c))
    src = inspect.getsource(model_cls.forward)
    # the two capture points whose numbering the rule encodes
    assert re.search(r"_maybe_add_hidden_state\(\s*[^,]+,\s*self\.start_layer,", src)
    assert re.search(r"_maybe_add_hidden_state\(\s*aux_hidden_states,\s*\w+ \+ 1,", src)
    holder = types.SimpleNamespace(aux_hidden_state_layers=tuple(sorted(set(ids))))
    add = EagleModelMixin._maybe_add_hidden_state
    aux: list = []
    add(holder, aux, 0, "embedding", None)              # index 0: before the first layer
    for idx in range(layers):
        add(holder, aux, idx + 1, f"layer {idx}", None)  # after layer idx
    want = aux_layers.captured_outputs(aux_layers.vllm_rule(arch), sorted(set(ids)), layers)
    assert aux == ["embedding" if o == -1 else f"layer {o}" for o in want if o is not None]
