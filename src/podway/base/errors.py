"""The one root of Podway's exceptions.

Translation problems are data (see ``podway.translate.core.problems``), never exceptions; these
classes are for failures of the program itself: bad flags, a port that cannot be bound, an engine
that will not start.

``podway.cli.app.main`` prints any of them as one line (``error: <message>``) with exit status 2;
with ``--log-level debug`` the traceback follows. Raise them with a message that says what is wrong
and what to do.
"""


class PodwayError(Exception):
    """Root of every error Podway raises on purpose."""


class ConfigError(PodwayError):
    """A flag, setting or file given to Podway is unusable; the message says which and why."""


class EnvironmentProblem(PodwayError):
    """Something Podway needs from its surroundings is missing or unusable: a port already in
    use, no cluster to talk to, a kubeconfig that does not exist. The message says what is wrong
    and what to do about it."""
