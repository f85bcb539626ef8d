"""``patch(model)``: tritred in a model one did not write, by giving its modules tritred's classes in place.

A module is patched by reassigning its ``__class__`` to a subclass of its own class whose forward runs tritred's
ops, rather than by replacing it with a new module in its parent. The object stays the same: its parameters and
buffers (the same tensor objects, so an optimizer built before keeps working), ``state_dict`` keys, hooks
(forward, pre-forward, backward, state_dict), ``training`` flag, attributes, and every reference to it (a module
shared by two parents, a module held outside the tree, the root module itself) are untouched, nothing is copied,
and ``isinstance`` with the original class still holds. Undoing is the reverse assignment (:func:`unpatch`).

Which class a module gets (:func:`patched_class`):

- ``torch.nn.LayerNorm``, ``RMSNorm``, ``BatchNorm1d/2d/3d``, ``SyncBatchNorm``, ``Softmax``, ``LogSoftmax``,
  ``CrossEntropyLoss``: tritred's class of the same name (:mod:`tritred_ops.nn`); a subclass of one of them that
  keeps torch's forward (e.g. one that only changes ``__init__`` or ``_check_input_dim``): a class made from both,
  the subclass first (``class _(Sub, tritred_ops.nn.LayerNorm)``);
- the RMSNorm/LayerNorm classes of transformers' model families whose forward's source is one of the forms of
  :mod:`tritred_ops.nn.transformers_norms`: a subclass with that form's tritred forward (or, for a LayerNorm
  subclass whose forward calls ``super().forward``, tritred's LayerNorm put between it and torch's).

The classes made here are named like the original, live in this module and pickle by name (a module attribute
hook rebuilds them on load), so ``torch.save``/``copy.deepcopy`` of a patched model keep it patched.
"""

from __future__ import annotations

import importlib
import logging
import weakref
from collections import Counter
from collections.abc import Iterable
from typing import Any, TypeVar

import torch
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.utils import parametrize

from . import nn as tnn
from .nn.transformers_norms import form_of

logger = logging.getLogger("tritred")

M = TypeVar("M", bound=torch.nn.Module)

#: torch's module classes, tritred's classes for them, and the op each runs (the module "kind").
TORCH_MODULES: tuple[tuple[type[torch.nn.Module], type[torch.nn.Module], str], ...] = (
    (torch.nn.LayerNorm, tnn.LayerNorm, "layer_norm"),
    (torch.nn.RMSNorm, tnn.RMSNorm, "rms_norm"),
    (torch.nn.BatchNorm1d, tnn.BatchNorm1d, "batch_norm"),
    (torch.nn.BatchNorm2d, tnn.BatchNorm2d, "batch_norm"),
    (torch.nn.BatchNorm3d, tnn.BatchNorm3d, "batch_norm"),
    (torch.nn.SyncBatchNorm, tnn.SyncBatchNorm, "batch_norm"),
    (torch.nn.Softmax, tnn.Softmax, "softmax"),
    (torch.nn.LogSoftmax, tnn.LogSoftmax, "log_softmax"),
    (torch.nn.CrossEntropyLoss, tnn.CrossEntropyLoss, "cross_entropy"),
)
#: The module kinds ``include``/``exclude`` accept, besides class names and classes.
KINDS = frozenset({"layer_norm", "rms_norm", "batch_norm", "softmax", "log_softmax", "cross_entropy", "transformers"})

_PATCHED: weakref.WeakKeyDictionary[type, type | None] = weakref.WeakKeyDictionary()


def _name(cls: type) -> str:
    """The made class's qualified name: the original's module and qualified name in one attribute name that pickle
    looks up in this module (``/`` for dots: no Python identifier has one)."""
    return f"Tritred[{cls.__module__}:{cls.__qualname__}]".replace(".", "/")


def _make(cls: type, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
    namespace = {"_tritred_original": cls, "__module__": __name__, "__qualname__": _name(cls),
                 "__doc__": cls.__doc__, **namespace}
    return type(cls.__name__, bases, namespace)


def patched_class(cls: type) -> type | None:
    """The class :func:`patch` gives a module of class ``cls`` (made once per class), or None when ``cls`` is not
    patched: neither listed nor recognized, torch's class with its forward overridden, or already tritred's."""
    if cls in _PATCHED:
        return _PATCHED[cls]
    target: type | None = None
    if "_tritred_original" not in cls.__dict__:
        for torch_cls, tritred_cls, _ in TORCH_MODULES:
            if issubclass(cls, torch_cls) and getattr(cls, "forward", None) is torch_cls.forward:
                target = tritred_cls if cls is torch_cls else _make(cls, (cls, tritred_cls), {})
                break
        else:
            form = form_of(cls)
            if form is not None:
                if form.forward is None:
                    target = _make(cls, (cls, tnn.LayerNorm), {"_tritred_form": form})
                else:
                    target = _make(cls, (cls,), {"forward": form.forward, "_tritred_form": form})
    _PATCHED[cls] = target
    return target


def _tags(cls: type) -> set[str]:
    """What ``include``/``exclude`` names match for a module of the original class ``cls``: the names of ``cls`` and
    its bases up to ``torch.nn.Module``, the kind (the op it runs) and "transformers" for the families' norms."""
    tags = {c.__name__ for c in cls.__mro__ if issubclass(c, torch.nn.Module) and c is not torch.nn.Module}
    for torch_cls, _, kind in TORCH_MODULES:
        if issubclass(cls, torch_cls):
            tags.add(kind)
    form = form_of(cls)
    if form is not None:
        tags |= {form.op, "transformers"}
    return tags


def _selection(names: Any, arg: str) -> tuple[set[str], tuple[type, ...]] | None:
    """``include``/``exclude`` as (names, classes): None; a class name, a kind or a class; or an iterable of them."""
    if names is None:
        return None
    items = [names] if isinstance(names, (str, type)) else list(names) if isinstance(names, Iterable) else None
    if items is None or not all(isinstance(item, (str, type)) for item in items):
        raise TypeError(f"patch(): {arg} must be None, a class name, a module kind ({', '.join(sorted(KINDS))}), a "
                        f"module class, or an iterable of them, not {names!r}")
    return {i for i in items if isinstance(i, str)}, tuple(i for i in items if isinstance(i, type))


def _selected(cls: type, selection: tuple[set[str], tuple[type, ...]]) -> bool:
    names, classes = selection
    return bool(names & _tags(cls)) or issubclass(cls, classes)


def patch(model: M, include: Any = None, exclude: Any = None) -> M:
    """Run ``model``'s norm, softmax and cross-entropy modules on tritred's ops, in place; returns ``model``.

    Every module of ``model`` (``model.modules()``, the model itself included) whose class has a tritred class
    (:func:`patched_class`: torch's LayerNorm, RMSNorm, BatchNorm1d/2d/3d, SyncBatchNorm, Softmax, LogSoftmax,
    CrossEntropyLoss and their subclasses that keep torch's forward; the recognized RMSNorm/LayerNorm classes of
    transformers' model families) gets that class, by ``module.__class__ = ...``: the same object, its parameters,
    buffers, hooks and ``state_dict`` keys unchanged. Outputs and gradients are torch's (the original module's)
    within one rounding of the output dtype; calls tritred does not take run the original forward (logged at
    DEBUG).

    Args:
        model: any ``torch.nn.Module``.
        include: None (every patchable module) or what to patch: a class name (``"LayerNorm"``,
            ``"LlamaRMSNorm"``; a module matches the name of its class or of any of its bases), a module kind
            (``"layer_norm"``, ``"rms_norm"``, ``"batch_norm"``, ``"softmax"``, ``"log_softmax"``,
            ``"cross_entropy"`` by the op the module runs, or ``"transformers"`` for the transformers families'
            norms), a class (``torch.nn.BatchNorm2d``: its subclasses too), or an iterable (set, list) of these.
        exclude: the same forms; matching modules are left alone (exclude wins over include).

    Idempotent: patching a patched model changes nothing. A module whose ``forward`` was set on the instance
    (``module.forward = ...``, as accelerate's hooks do) is skipped, logged: the instance attribute would hide the
    class's forward. So is a parametrized module (``torch.nn.utils.parametrize``): its class is parametrize's own,
    which ``remove_parametrizations`` must find and strip again (patch first, then parametrize: both work). A
    lazy module (``LazyBatchNorm2d``...) not yet run keeps its class and becomes tritred's class at its first
    forward, where torch's makes it its torch class (``cls_to_become``); that first call runs the lazy class's
    forward, as torch's, and the later ones tritred's.
    :func:`unpatch` undoes it.

    Raises:
        TypeError: ``model`` not a Module; ``include``/``exclude`` not of the forms above.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"patch(): model must be a torch.nn.Module, not {type(model).__name__}")
    inc, exc = _selection(include, "include"), _selection(exclude, "exclude")
    done: Counter[str] = Counter()
    for name, module in model.named_modules():
        cls: type = type(module)
        become = getattr(module, "cls_to_become", None) if isinstance(module, LazyModuleMixin) else None
        if isinstance(become, type):
            cls = become  # (a lazy module becomes this class at its first forward: give it ours)
        target = patched_class(cls)
        if target is None or (inc is not None and not _selected(cls, inc)) or (exc is not None
                                                                              and _selected(cls, exc)):
            continue
        if "forward" in module.__dict__:
            logger.debug("tritred_ops.patch: %s (%s) left alone: its forward is set on the instance", name or
                         "<model>", cls.__name__)
            continue
        if parametrize.is_parametrized(module):
            logger.debug("tritred_ops.patch: %s (%s) left alone: parametrized (patch before registering "
                         "parametrizations)", name or "<model>", cls.__name__)
            continue
        if cls is type(module):
            module.__class__ = target
        else:
            module.cls_to_become = target
        done[cls.__name__] += 1
    if done:
        logger.debug("tritred_ops.patch: %s", ", ".join(f"{n} x{c}" for n, c in sorted(done.items())))
    return model


def unpatch(model: M) -> M:
    """Undo :func:`patch`: every module of ``model`` whose class is one of tritred's (patched, or built as a
    :mod:`tritred_ops.nn` module) gets its original class back (torch's, or the transformers family's). In place;
    returns ``model``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"unpatch(): model must be a torch.nn.Module, not {type(model).__name__}")
    for module in model.modules():
        original = type(module).__dict__.get("_tritred_original")
        if original is not None:
            module.__class__ = original
        become = module.__dict__.get("cls_to_become")
        if isinstance(become, type) and "_tritred_original" in become.__dict__:
            del module.cls_to_become  # (a lazy module patched before its first forward: torch's class again)
    return model


def __getattr__(name: str) -> type:
    """The classes made by :func:`patched_class`, by the name pickle stored (:func:`_name`): rebuilt on load."""
    if name.startswith("Tritred[") and name.endswith("]"):
        module, _, qualname = name[len("Tritred["):-1].replace("/", ".").partition(":")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        target = patched_class(obj) if isinstance(obj, type) else None
        if target is not None and target.__qualname__ == name:
            return target
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
