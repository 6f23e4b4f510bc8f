"""MIL program IR, builder with type inference, and the model.mil emitter and parser.

The protobuf emitter is `app.mil.to_proto` (imported on its own: it loads coremltools)."""

from app.language.targets import DEFAULT_TARGET, TARGETS, Target, TargetName, get_target
from app.mil.assemble import MILParseError, ParsedProgram
from app.mil.builder import Builder
from app.mil.ir import (
    IDENTIFIER,
    ConstValue,
    Function,
    MILBuildError,
    Operation,
    OpsetError,
    Program,
    Var,
)
from app.mil.text import emit_text, parse_text
from app.mil.types import DType, StateType, TensorType

__all__ = [
    "DEFAULT_TARGET",
    "IDENTIFIER",
    "TARGETS",
    "Builder",
    "ConstValue",
    "DType",
    "Function",
    "MILBuildError",
    "MILParseError",
    "Operation",
    "OpsetError",
    "ParsedProgram",
    "Program",
    "StateType",
    "Target",
    "TargetName",
    "TensorType",
    "Var",
    "emit_text",
    "get_target",
    "parse_text",
]
