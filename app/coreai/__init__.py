"""Core AI (`.aimodel`): the project's IR program written with Apple's `coreai.authoring`, and
run by Apple's CPU runtime in a child process. One translation from the IR, not a second catalog.

coreai-core is optional (the `coreai` extra): importing this package never imports it, and
`require_coreai` answers 503 naming it where a request needs it.

    from app.coreai import aimodel_files, translate, untranslatable
    files = aimodel_files(translate(program))   # the inside of <name>.aimodel/, same bytes always
"""

from app.coreai.asset import aimodel_files
from app.coreai.availability import PACKAGE, PINNED, coreai_version, require_coreai
from app.coreai.runtime import AppleRuntimeError, Call, RunReport, run_aimodel, run_aimodels
from app.coreai.translate import TranslationError, Untranslatable, translate, untranslatable
from app.coreai.weights import SUBBYTE_NOTE

__all__ = [
    "PACKAGE",
    "PINNED",
    "SUBBYTE_NOTE",
    "AppleRuntimeError",
    "Call",
    "RunReport",
    "TranslationError",
    "Untranslatable",
    "aimodel_files",
    "coreai_version",
    "require_coreai",
    "run_aimodel",
    "run_aimodels",
    "translate",
    "untranslatable",
]
