"""posenc's and posenc.torch's public callables written in Python document every argument: a
Google-style docstring whose ``Args:`` section names each parameter of the signature (a class: its
constructor's) and nothing else, and a ``Returns:`` section for every function and for each
method that returns a value. Public means the names of ``posenc.__all__``, ``posenc.torch.__all__``
and ``posenc.torch.distributed.__all__``, and the methods and properties of those classes that do
not start with an underscore (the ones inherited from torch.nn.Module are torch's). Held to it:
the names defined in the modules of _MODULES (the bindings of posenc._core document themselves
through pybind11's signatures)."""

import ast
import inspect
import re
import textwrap
import types

import pytest

import posenc
import posenc.torch as pt

# An entry of an Args: section: "name: text" or "name (type): text", one parameter per entry
# (*args and **kwargs as "*args:" and "**kwargs:").
_ENTRY = re.compile(r"\*{0,2}(?P<name>\w+)(?: \([^)]*\))?:(?: |$)")
_SECTION = re.compile(r"[A-Z][A-Za-z ]*:$")
# The modules whose public names are held to it.
_MODULES = (
    "posenc",
    "posenc.torch.absolute",
    "posenc.torch.attention",
    "posenc.torch.biases",
    "posenc.torch.distributed",
    "posenc.torch.kv_cache",
    "posenc.torch.mrope",
    "posenc.torch.rope",
)


def _public_objects():
    """(qualified name, object, whether it is a method) of each public callable and property of
    posenc.torch."""
    found = []
    for module, names in (
        (posenc, posenc.__all__),
        (pt, pt.__all__),
        (pt.distributed, pt.distributed.__all__),
    ):
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType):
                continue
            if getattr(obj, "__module__", None) not in _MODULES:  # not constants
                continue
            found.append((f"{module.__name__}.{name}", obj, False))
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    if not member.startswith("_"):
                        found.append((f"{module.__name__}.{name}.{member}", value, True))
    return found


def _function(obj):
    """The plain function behind a function, classmethod or staticmethod; None for others."""
    if isinstance(obj, (classmethod, staticmethod)):
        return obj.__func__
    return obj if inspect.isfunction(obj) else None


def _documented_arguments(doc):
    """The names an Args: section lists (None when there is no such section)."""
    lines = doc.splitlines()
    if "Args:" not in lines:
        return None
    names = []
    for line in lines[lines.index("Args:") + 1 :]:
        if line and not line[0].isspace():
            break  # the next section
        text = line.strip()
        # An entry sits at the section's first indent; deeper lines continue its text.
        if text and len(line) - len(line.lstrip()) == 4:
            match = _ENTRY.match(text)
            names.append(match["name"] if match else text)
    return names


def _sections(doc):
    return {line for line in doc.splitlines() if _SECTION.fullmatch(line)}


def _parameters(function, is_method):
    """(the parameters a docstring must name, those it may name): not self or cls; *args and
    **kwargs may be named but need not be."""
    parameters = list(inspect.signature(function).parameters.values())
    if is_method:
        parameters = parameters[1:]
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    required = [p.name for p in parameters if p.kind not in variadic]
    return required, [p.name for p in parameters]


def _returns_value(function):
    """Whether the function's own body (not a nested def or lambda) returns something other than
    None."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    pending = list(tree.body[0].body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                return True
        pending.extend(ast.iter_child_nodes(node))
    return False


def _problems(name, obj, is_method):
    """What the docstring of obj lacks, as readable lines (empty when it is complete)."""
    if isinstance(obj, property):
        return [] if (obj.__doc__ or "").strip() else [f"{name}: a property without a docstring"]
    if inspect.isclass(obj):
        function, needs_returns = obj.__init__, False
        if function is object.__init__:
            return []
        is_method = True
    else:
        function = _function(obj)
        if function is None:
            return []
        needs_returns = not is_method or _returns_value(function)
        if isinstance(obj, staticmethod):
            is_method = False
    doc = inspect.getdoc(obj) or ""
    if not doc:
        return [f"{name}: no docstring"]
    problems = []
    required, allowed = _parameters(function, is_method)
    listed = _documented_arguments(doc)
    if listed is None:
        if required:
            problems.append(f"{name}: no Args: section (parameters {required})")
    else:
        missing = [p for p in required if p not in listed]
        unknown = [p for p in listed if p not in allowed]
        if missing:
            problems.append(f"{name}: Args: lacks {missing}")
        if unknown:
            problems.append(f"{name}: Args: lists {unknown}, not parameters of the signature")
    if needs_returns and "Returns:" not in _sections(doc):
        problems.append(f"{name}: no Returns: section")
    return problems


PUBLIC = _public_objects()


def test_the_public_surface_is_found():
    names = {name for name, _, _ in PUBLIC}
    for expected in (
        "posenc.torch.attention",
        "posenc.torch.RotaryEmbedding",
        "posenc.torch.RotaryEmbedding.forward",
        "posenc.torch.RotaryEmbedding.from_hf_config",
        "posenc.torch.RotaryEmbedding.inv_freq",
        "posenc.torch.LearnedPositions.save",
        "posenc.torch.KVCache.attend",
        "posenc.torch.KVCache.kv_heads",
        "posenc.torch.distributed.context_parallel_attention",
    ):
        assert expected in names


@pytest.mark.parametrize("name, obj, is_method", PUBLIC, ids=[name for name, _, _ in PUBLIC])
def test_public_callable_documents_its_arguments(name, obj, is_method):
    assert _problems(name, obj, is_method) == []


def _undocumented(q, k=None, *, scale=None):
    """Attention of q and k.

    Args:
        q: the queries.
            scale: a deeper line continues q's text and names nothing.
        k: the keys.
        v: no such parameter.
    """
    return q


class _Undocumented:
    """A module.

    Args:
        size: its size.
    """

    def __init__(self, size, dtype):
        pass

    def forward(self, x):
        """The output.

        Args:
            x: the input.
        """
        if x is None:
            return None
        return x

    def clear(self, row):
        """Empties row.

        Args:
            row: the row.
        """
        return


def test_the_checker_names_what_a_docstring_lacks():
    assert _problems("f", _undocumented, False) == [
        "f: Args: lacks ['scale']",
        "f: Args: lists ['v'], not parameters of the signature",
        "f: no Returns: section",
    ]
    assert _problems("C", _Undocumented, False) == ["C: Args: lacks ['dtype']"]
    assert _problems("C.forward", vars(_Undocumented)["forward"], True) == [
        "C.forward: no Returns: section"
    ]
    assert _problems("C.clear", vars(_Undocumented)["clear"], True) == []
    assert _problems("p", property(lambda self: 0), True) == ["p: a property without a docstring"]
