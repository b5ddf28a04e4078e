"""Wrong argument types as posenc's errors.

The bindings (posenc._core) are pybind11 functions: an argument of the wrong
type never reaches posenc's own checks, and pybind11 answers with a TypeError
of its own ("incompatible function arguments. The following argument types
are supported: ..."). ``checked_types`` wraps each public function and class
of _core once, at import, so that such a call raises ``ArgumentTypeError``
(a ``posenc.Error`` and a ``TypeError``) in posenc's pattern: the function,
the signature it takes and the types it got. Any other error passes through
unchanged, and a call with the right types costs one Python call more.
"""

import functools
import re

from posenc._core import Error


class ArgumentTypeError(Error, TypeError):
    """An argument of a type the function does not take."""


_INCOMPATIBLE = re.compile(r"incompatible (function|constructor) arguments")
_SIGNATURE = re.compile(r"^\s*\d+\. (?:[\w.]+)?(\(.*\))(?: -> .*)?$", re.MULTILINE)
_SHOWN = 60  # characters of each value in the message
# pybind11 3 spells the numbers a parameter converts from as protocols; the message says the type.
_PLAIN_TYPES = {
    "typing.SupportsInt | typing.SupportsIndex": "int",
    "typing.SupportsFloat | typing.SupportsIndex": "float",
}


def _shown(value):
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # arrays and tensors
        return f"{value.dtype} {tuple(value.shape)}"
    text = " ".join(repr(value).split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _got(args, kwargs):
    shown = [f"{type(a).__name__} {_shown(a)}" for a in args]
    shown += [f"{k}={type(v).__name__} {_shown(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(shown) + ")"


def _argument_error(name, error, args, kwargs):
    text = str(error)
    for spelled, plain in _PLAIN_TYPES.items():
        text = text.replace(spelled, plain)
    signatures = _SIGNATURE.findall(text)
    rule = " or ".join(signatures) if signatures else "have the documented types"
    return ArgumentTypeError(f"[{name}] arguments must be {rule}, got {_got(args, kwargs)}")


def _checked(function, name, skip_self=False):
    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except TypeError as error:
            if type(error) is not TypeError or not _INCOMPATIBLE.search(str(error)):
                raise
            shown = args[1:] if skip_self else args
            raise _argument_error(name, error, shown, kwargs) from None

    return call


def _is_binding(value):
    # pybind11 functions and methods are builtins; enums and properties are not.
    return type(value).__name__ in ("builtin_function_or_method", "instancemethod")


def checked_types(module, names):
    """Wraps the functions among names in module, and the constructor,
    methods and static methods of the classes, in place."""
    for name in names:
        value = getattr(module, name)
        if isinstance(value, type):
            _check_class(value)
        elif _is_binding(value):
            setattr(module, name, _checked(value, name))


def _check_class(cls):
    for attribute, raw in list(vars(cls).items()):
        if attribute.startswith("__") and attribute not in ("__init__", "__setstate__"):
            continue
        name = f"{cls.__name__}.{attribute}" if attribute != "__init__" else cls.__name__
        if isinstance(raw, staticmethod) or type(raw).__name__ == "builtin_function_or_method":
            function = getattr(cls, attribute)
            if _is_binding(function):
                setattr(cls, attribute, staticmethod(_checked(function, name)))
        elif _is_binding(raw):
            setattr(cls, attribute, _checked(raw, name, skip_self=True))
