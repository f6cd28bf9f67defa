"""One exception type for every user-facing mistake, so the CLI can print one line and exit
non-zero."""


class BubblelabError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class RequestError(BubblelabError):
    """A single request is invalid; the engine rejects it and keeps serving the others."""


class WorkerError(BubblelabError):
    """A tensor-parallel worker process died or stopped answering: the run ends, the engine is
    unusable."""
