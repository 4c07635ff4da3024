"""Snapshot → IR + problems. Pure: no I/O, no clients, never raises on loaded objects."""

from podway.translate.core.options import BackendMode, NplTrust, TranslateOptions
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.translator import IncrementalTranslator, Result, translate

__all__ = [
    "BackendMode",
    "IncrementalTranslator",
    "NplTrust",
    "Problem",
    "Reason",
    "Result",
    "Severity",
    "TranslateOptions",
    "translate",
]
