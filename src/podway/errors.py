"""The one root of Podway's exceptions.

Translation problems are data (see ``podway.translate.problems``), never exceptions; these classes
are for failures of the program itself: bad flags, a port that cannot be bound, an engine that
will not start.
"""


class PodwayError(Exception):
    """Root of every error Podway raises on purpose."""


class ConfigError(PodwayError):
    """A flag, setting or file given to Podway is unusable; the message says which and why."""
