"""A registry by name: a dict filled by a decorator, with errors that list the valid names.

Tasks, models and scorers each have one. Adding a component is: write the class (and, for tasks and
scorers, its config dataclass) in one file, decorate it with ``@REGISTRY.register("name", schema=...)``,
add ``conf/<group>/name.yaml``. The schema is stored in Hydra's ConfigStore as ``schema/<group>/<name>``
by :func:`ssa_repro.config.register_configs`, and a run folder's saved config is read over it
(:func:`schema_of`, used by :class:`ssa_repro.core.rundir.RunDir`). Nothing else: each package's
``__init__.py`` imports every module of its folder (``pkgutil``), and importing a module registers it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
_BY_KIND: dict[str, Registry] = {}  # the package's registries by kind ("task", "scorer", ...)


class UnknownNameError(KeyError):
    """Raised for a name that is not registered; the message lists the registered ones."""

    def __str__(self) -> str:  # KeyError would quote the message; show it plainly
        return str(self.args[0])


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self.schemas: dict[str, type] = {}  # name -> config dataclass, where the component has one
        _BY_KIND.setdefault(kind, self)

    def register(self, name: str, schema: type | None = None) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            if schema is not None:
                self.schemas[name] = schema
            return obj

        return deco

    def get(self, name: str) -> T:
        if name not in self._items:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; registered {self.kind}s: {', '.join(self.names())}"
            )
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items


def schema_of(kind: str, name: str) -> type | None:
    """The config dataclass registered as ``name`` in the registry of ``kind`` (``"task"``,
    ``"scorer"``, ...), or None when there is none: lower layers read a component's schema without
    importing the layer that defines it (the registry is filled when that layer is imported)."""
    registry = _BY_KIND.get(kind)
    return None if registry is None else registry.schemas.get(name)
