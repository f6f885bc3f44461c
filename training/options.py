"""Each training option written once: its field in :class:`training.config.TrainConfig`, with an :class:`Option`.

A config field's type, default and meaning live on the field (``field(default=..., metadata=option("what it
means", GROUP))``); the command-line flags of ``fit``, ``pack`` and ``finalise`` are generated from them
(:func:`add_flags`), and the parsed flags go back to field values through the same metadata
(:func:`values_of`), as ``service.inference.spec.ScorerSpec`` does for the service's knobs. A flag's name is
``--<field-with-dashes>`` unless the option names another (``--include-ungradable`` sets ``gradable_only`` to
false); its type and choices come from the field's annotation (a ``Literal`` gives the choices).

Example::

    add_flags(parser, TrainConfig, defaults=TrainConfig(data="", out=""))
    config = TrainConfig(**values_of(parser.parse_args(argv), TrainConfig))
"""

from __future__ import annotations

import argparse
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import Field, dataclass, fields
from typing import Any, Literal, get_args, get_origin, get_type_hints

DATA = "data and output"
MODEL = "model"
RECIPE = "optimisation recipe (defaults: the authors' Adam lr 1e-3, amsgrad, ρ0 = -4)"
SERVING = "validation and serving"
RUN = "run control"
GROUPS = (DATA, MODEL, RECIPE, SERVING, RUN)


@dataclass(frozen=True)
class Option:
    """What a config field says on the command line besides its type and default."""

    help: str  # the flag's help (one or two sentences)
    group: str = RUN  # the --help section
    flag: str | None = None  # default: --<field-with-dashes>
    switch: bool | None = None  # a bool field set by a valueless flag to this value (False: --no-augment)
    metavar: str | tuple[str, ...] | None = None
    nargs: int | None = None  # a fixed count of values (the split's three fractions)
    repeat: bool = False  # the flag is given once per item (a list of its values)
    choices: tuple[str, ...] | None = None  # valid values where the annotation does not give them
    parse: Callable[[Any], Any] | None = None  # the flag's value(s) -> the field's value
    value_type: Callable[[str], Any] | None = None  # one value's type where the annotation does not give it
    required: bool = False
    default_text: str | None = None  # how the default reads in --help where the field's value would not
    # the flag's former spelling and its values in the field's words, kept (hidden from --help) so that commands
    # recorded before a rename still run, e.g. ("--test-time-flip", {"off": "1", "on": "2", "auto": "auto"})
    old_flag: tuple[str, dict[str, str]] | None = None


def option(help: str, group: str = RUN, **kw: Any) -> dict[str, Option]:
    """A field's metadata: ``field(default=..., metadata=option("what it means", DATA))``."""
    return {"option": Option(help, group, **kw)}


def options(cls: type) -> list[tuple[Field[Any], Option]]:
    """The fields of ``cls`` that have an :class:`Option`, in declaration order."""
    return [(f, f.metadata["option"]) for f in fields(cls) if "option" in f.metadata]


def flag_of(f: Field[Any], opt: Option) -> str:
    return opt.flag or "--" + f.name.replace("_", "-")


def _scalar(annotation: Any) -> Any:
    """``int | None`` -> ``int``; other annotations as they are."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def add_flags(parser: argparse.ArgumentParser, cls: type, *, defaults: Any, names: Iterable[str] | None = None,
              as_recorded: bool = False, grouped: bool = True) -> None:
    """Add the flags of ``cls``'s options (``names``: only these, in this order) to ``parser``.

    ``defaults``: an instance whose values are the flags' defaults. ``as_recorded``: every default is None
    ("keep the value a run recorded"; :func:`values_of` then leaves the field out), the help says so.
    ``grouped``: one --help section per option group.
    """
    hints = get_type_hints(cls)
    chosen = options(cls)
    if names is not None:
        by_name = {f.name: (f, o) for f, o in chosen}
        chosen = [by_name[n] for n in names]
    used = {opt.group for _, opt in chosen}
    sections = {g: parser.add_argument_group(g) for g in GROUPS if grouped and g in used}  # in GROUPS' order
    for f, opt in chosen:
        target: Any = parser
        if grouped:
            target = sections[opt.group]
        target.add_argument(flag_of(f, opt), dest=f.name, **_argument(f, opt, _scalar(hints[f.name]),
                                                                       defaults, as_recorded))
        if opt.old_flag is not None:
            old, words = opt.old_flag
            target.add_argument(old, dest=f.name, action=_OldSpelling, words=words, choices=tuple(words),
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)


class _OldSpelling(argparse.Action):
    """A renamed flag's former spelling: its value in the new flag's words (:attr:`Option.old_flag`)."""

    def __init__(self, option_strings: list[str], dest: str, words: dict[str, str], **kw: Any) -> None:
        super().__init__(option_strings, dest, **kw)
        self.words = words

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, self.words[str(values)])


def _argument(f: Field[Any], opt: Option, annotation: Any, defaults: Any, as_recorded: bool) -> dict[str, Any]:
    default = None if as_recorded else getattr(defaults, f.name)
    text = re.sub(r"\s*\(default: [^()]*\)", "", opt.help) + " (default: as recorded)" if as_recorded else opt.help
    if opt.default_text and not as_recorded:
        text += f" (default: {opt.default_text})"
    if opt.switch is not None:
        return {"action": "store_const", "const": opt.switch, "default": default, "help": text}
    kw: dict[str, Any] = {"help": text, "default": default, "required": opt.required and not as_recorded}
    if get_origin(annotation) is Literal:
        kw["choices"] = tuple(get_args(annotation))
    elif annotation in (int, float):
        kw["type"] = annotation
    if opt.choices is not None:
        kw["choices"] = opt.choices
    if opt.value_type is not None:
        kw["type"] = opt.value_type
    if opt.metavar is not None:
        kw["metavar"] = opt.metavar
    if opt.nargs is not None:
        kw["nargs"] = opt.nargs
        kw["default"] = None if default is None else list(default)
    if opt.repeat:
        kw["action"] = "append"
        kw["default"] = None if as_recorded else []
    return kw


def values_of(args: argparse.Namespace, cls: type, *, defaults: Any = None,
              names: Iterable[str] | None = None) -> dict[str, Any]:
    """The field values of the parsed flags (``names``: only these). A flag left at None by ``as_recorded`` is
    left out; a value the command line gave goes through its option's ``parse`` (a default argparse handed back
    as it is, the very object of ``defaults``, is already the field's value)."""
    wanted = None if names is None else set(names)
    out: dict[str, Any] = {}
    for f, opt in options(cls):
        if (wanted is not None and f.name not in wanted) or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if value is None and defaults is None:  # as recorded: unchanged
            continue
        given = defaults is None or value is not getattr(defaults, f.name)
        out[f.name] = opt.parse(value) if opt.parse is not None and given and value is not None else value
    return out
