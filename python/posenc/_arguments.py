"""Wrong argument types as posenc's errors.

The bindings (posenc._core) are pybind11 functions: an argument of the wrong
type never reaches posenc's own checks, and pybind11 answers with a TypeError
of its own ("incompatible function arguments. The following argument types
are supported: ..."). ``checked_types`` wraps each public function and class
of _core once, at import, so that such a call raises ``ArgumentTypeError``
(a ``posenc.Error`` and a ``TypeError``) in posenc's pattern: the function,
the signature it takes and the types it got. Any other error passes through
unchanged, and a call with the right types costs one Python call more.

The same wrappers refuse an instance whose __init__ never ran or raised (Python
can hold one: ``KVCache.__new__(KVCache)``), to which pybind11 would hand
uninitialized memory: its repr says so, and its methods and properties, and
every binding it is passed to, raise ``posenc.Error``. A constructor that
raises leaves no reference to its half-built instance in the traceback, so
that a debugger or pytest showing the frame's values never meets it.
"""

import functools
import re

from posenc import _core
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


_classes = ()  # the classes of _core: their instances are checked to be constructed


def _unbuilt_error(name, value):
    return Error(
        f"[{name}] the {type(value).__name__} was never constructed: its __init__ did not run or "
        "raised; make one by calling the class"
    )


def _constructed(value):
    """Whether value's __init__ ran (pybind11's flag). torch.compile may take the answer as a
    constant: posenc.torch marks it so, as Dynamo cannot trace into a binding."""
    return _core._constructed(value)


def _refuse_unbuilt(name, args, kwargs):
    for value in (*args, *kwargs.values()):
        if isinstance(value, _classes) and not _constructed(value):
            raise _unbuilt_error(name, value)


def _is_incompatible(error):
    return type(error) is TypeError and _INCOMPATIBLE.search(str(error))


def _checked(function, name, method=False):
    """method: the first argument is the instance."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        _refuse_unbuilt(name, args, kwargs)
        try:
            return function(*args, **kwargs)
        except TypeError as error:
            if not _is_incompatible(error):
                raise
            raise _argument_error(name, error, args[1:] if method else args, kwargs) from None

    return call


def _checked_init(function, name):
    """__init__ and __setstate__, which construct the instance."""

    @functools.wraps(function)
    def init(self, *args, **kwargs):
        _refuse_unbuilt(name, args, kwargs)
        try:
            function(self, *args, **kwargs)
        except BaseException as error:
            del self  # half-built: no traceback may show it
            if _is_incompatible(error):
                raise _argument_error(name, error, args, kwargs) from None
            raise

    return init


def _checked_repr(function):
    @functools.wraps(function)
    def call(self):
        if not _constructed(self):
            return f"<posenc.{type(self).__name__}, never constructed>"
        return function(self)

    return call


def _checked_property(cls, attribute, prop, name):
    # The binding's own property stays, under another name: torch.compile reads it as it reads any
    # binding's attribute, where it cannot trace a call of prop.fget.
    unchecked = f"_{attribute}_unchecked"
    setattr(cls, unchecked, prop)

    def built(self):
        if not _constructed(self):
            raise _unbuilt_error(name, self)
        return self

    def get(self):
        return getattr(built(self), unchecked)

    def set(self, value):
        setattr(built(self), unchecked, value)

    return property(get, set if prop.fset else None, doc=prop.__doc__)


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
    global _classes
    _classes += (cls,)
    for attribute, raw in list(vars(cls).items()):
        name = f"{cls.__name__}.{attribute}" if attribute != "__init__" else cls.__name__
        if attribute in ("__init__", "__setstate__"):  # both build an unbuilt instance
            setattr(cls, attribute, _checked_init(raw, name))
        elif attribute == "__repr__":
            setattr(cls, attribute, _checked_repr(raw))
        elif attribute == "_pybind11_conduit_v1_":
            continue
        elif type(raw) is property:  # not pybind11's static properties
            setattr(cls, attribute, _checked_property(cls, attribute, raw, name))
        elif isinstance(raw, staticmethod) or type(raw).__name__ == "builtin_function_or_method":
            function = getattr(cls, attribute)
            if _is_binding(function):
                setattr(cls, attribute, staticmethod(_checked(function, name)))
        elif _is_binding(raw):
            setattr(cls, attribute, _checked(raw, name, method=True))
