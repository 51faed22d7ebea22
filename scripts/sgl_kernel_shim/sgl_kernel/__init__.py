"""Import-time shim for ``sgl_kernel`` (tests only; see ../README.md).

Every attribute is a stub that raises NotImplementedError when called. SGLang's CPU engine
imports a few names from ``sgl_kernel`` at start-up but never calls them for a dense model:
its AMX path also needs the torch op ``torch.ops.sgl_kernel.convert_weight_packed``, which
this shim deliberately does not register, so SGLang takes its native torch paths even on an
AMX CPU. If a stub is ever called, it fails loudly instead of computing wrong.
"""

from __future__ import annotations

from typing import Any, NoReturn

__version__ = "0.0.1+cpu-shim"
IS_SHIM = True


def _make_stub(name: str) -> Any:
    def _stub(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"sgl_kernel shim: {name}() was called, but this sgl_kernel is only a stand-in for "
            "import-time names (scripts/sgl_kernel_shim); no CPU kernel exists here"
        )

    _stub.__name__ = name
    _stub.__qualname__ = name
    return _stub


def __getattr__(name: str) -> Any:
    # Dunder look-ups (__path__, __file__, __spec__ ...) must fail normally so that the import
    # machinery, pickle, inspect and hasattr() checks keep their usual behaviour.
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    stub = _make_stub(name)
    globals()[name] = stub
    return stub
