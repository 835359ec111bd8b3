"""structspec: grammar-constrained generation for language models."""

from structspec.errors import GrammarError, SchemaError, StructspecError
from structspec.grammar import Grammar
from structspec.grammar.parse_state import ParseState, StackLimitError
from structspec.grammar.tag_reading import TaggedText
from structspec.grammar.tags import StructuralTag, Tag
from structspec.masks.compiled import CompiledGrammar, compile
from structspec.tokens.vocabulary import Vocabulary

__version__ = "0.1.0"

__all__ = [
    "CompiledGrammar",
    "Generator",
    "Grammar",
    "GrammarError",
    "Grounded",
    "Matcher",
    "ParseState",
    "Request",
    "Result",
    "SchemaError",
    "SpecConfig",
    "StackLimitError",
    "StructspecError",
    "StructuralTag",
    "Tag",
    "TaggedText",
    "Vocabulary",
    "compile",
    "generate",
]

_GENERATION = ("Generator", "Request", "Result", "SpecConfig", "generate")


def __getattr__(name: str):
    # The matcher needs torch; importing it lazily keeps the CLI and pure-grammar use fast.
    if name == "Matcher":
        from structspec.masks.matcher import Matcher

        return Matcher
    if name == "Grounded":  # pydantic is imported only when it is asked for
        from structspec.jsonschema.pydantic_models import Grounded

        return Grounded
    if name in _GENERATION:
        import structspec.generation as generation

        return getattr(generation, name)
    raise AttributeError(f"module 'structspec' has no attribute {name!r}")
