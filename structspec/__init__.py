"""structspec: grammar-constrained generation for language models."""

from structspec.errors import GrammarError, SchemaError, StructspecError
from structspec.grammar import Grammar
from structspec.masks import CompiledGrammar, compile
from structspec.matcher import Matcher
from structspec.parse_state import ParseState, StackLimitError
from structspec.vocab import Vocabulary

__all__ = [
    "CompiledGrammar",
    "Matcher",
    "compile",
    "Grammar",
    "GrammarError",
    "ParseState",
    "SchemaError",
    "StackLimitError",
    "StructspecError",
    "Vocabulary",
]
