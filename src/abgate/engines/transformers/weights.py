"""The transformers engine's weights as loaded: every parameter of the model, by its
Hugging Face name, read one at a time as float32 on the CPU (:func:`loaded_weights`)."""

from __future__ import annotations

from typing import Any

from abgate.engines.base import LoadedTensor

__all__ = ["loaded_weights"]


def loaded_weights(model: Any) -> dict[str, LoadedTensor]:
    """name -> :class:`LoadedTensor` for ``model.named_parameters()`` (tied ones once)."""
    out: dict[str, LoadedTensor] = {}
    for name, param in model.named_parameters():  # tied parameters are yielded once
        out[name] = LoadedTensor(str(param.dtype).removeprefix("torch."),
                                 tuple(int(d) for d in param.shape), _reader(param))
    return out


def _reader(param: Any) -> Any:
    def read() -> Any:
        return param.detach().float().cpu().numpy()
    return read
