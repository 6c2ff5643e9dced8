"""The one error hierarchy of ftrl-ps.

Every error the library raises on purpose derives from :class:`FTRLPSError`.
The classes map to HTTP status codes, and error answers back to the classes,
in exactly one place (``ftrl_ps.ps.http_status``), shared by the server and
the client; the client also maps transport failures to :class:`TransportError`.

::

    FTRLPSError
    ├── ConfigError            bad hyper-parameters, arguments or layout   (400)
    │   └── LayoutMismatchError    worker and server disagree on the layout (409)
    ├── DataError              malformed training/test input or request rows (400)
    │   ├── InputIOError           a read a retry may cure (a URL's connection)
    │   └── ParseError             one bad line: file, line number, token
    ├── ModelFormatError       corrupt, truncated or foreign model file
    ├── OutputError            an output file cannot be written there
    ├── ProtocolError          a request body that fails validation        (400)
    │   └── PayloadTooLargeError   body over the size limit                 (413)
    ├── AuthError              missing or wrong token                      (401)
    ├── UnknownWorkerError     a worker id the server does not know        (404)
    ├── WorkerStateError       e.g. a push from a finished/dead worker     (409)
    │   └── PushGapError           a shard lacks earlier pushes: replay     (409)
    ├── ClockTimeoutError      an SSP wait that did not clear in time      (408)
    ├── UnavailableError       not ready / busy: retry later              (503)
    ├── ServerError            the server failed while handling a request  (500)
    ├── RequestTimeoutError    the request body did not arrive in time     (408)
    ├── TransportError         the client could not reach the server
    ├── UpdatesLostError       a shard lost pushes no journal holds any more
    ├── ClusterError           a process of the local cluster failed
    ├── StartupTimeoutError    servers or input files did not appear in time
    └── IncompleteRunError     configured workers never finished their shares
"""

from __future__ import annotations


class FTRLPSError(Exception):
    """Base class of every error raised on purpose by ftrl-ps."""


class ConfigError(FTRLPSError, ValueError):
    """Invalid hyper-parameters, arguments, or cluster layout."""


class LayoutMismatchError(ConfigError):
    """A worker's view of the key layout differs from the server's."""


class DataError(FTRLPSError, ValueError):
    """Malformed training or test data."""


class InputIOError(DataError):
    """Reading the input failed in a way a retry may cure (a URL's connection, a
    network filesystem's I/O error), unlike a bad line, a corrupt ``.gz`` or a
    missing or unreadable file: a local cluster restarts its worker."""


class ParseError(DataError):
    """A line of a libsvm file could not be parsed.

    Attributes
    ----------
    source : str
        File name (or ``"<stdin>"``).
    line : int
        1-based line number.
    token : str
        The offending token (possibly shortened).
    """

    def __init__(self, source: str, line: int, token: str, reason: str) -> None:
        self.source = source
        self.line = line
        self.token = token
        self.reason = reason
        super().__init__(f"{source}:{line}: {reason}: {token!r}")


class ModelFormatError(FTRLPSError, ValueError):
    """A model file is corrupt, truncated, or not an ftrl-ps model."""


class OutputError(FTRLPSError):
    """An output file (model, predictions, report) cannot be written where asked."""


class ProtocolError(FTRLPSError, ValueError):
    """A request or response body failed validation."""


class PayloadTooLargeError(ProtocolError):
    """A request body exceeded the configured size limit."""


class AuthError(FTRLPSError):
    """A state-changing request lacked the right token."""


class UnknownWorkerError(FTRLPSError, LookupError):
    """The server does not know the worker id in the request."""


class WorkerStateError(FTRLPSError):
    """The request is not allowed in the worker's current state."""


class PushGapError(WorkerStateError):
    """A shard has not applied pushes that this push follows (it restarted
    from an older checkpoint): the worker must replay them first."""


class ClockTimeoutError(FTRLPSError, TimeoutError):
    """An SSP clock wait did not clear before its deadline."""


class UnavailableError(FTRLPSError):
    """The service cannot take the request now (no model loaded yet, the online
    learner's queue is full, or too many state exports run); retry later."""


class ServerError(FTRLPSError):
    """The server failed while handling a request."""


class RequestTimeoutError(FTRLPSError, TimeoutError):
    """A request body did not arrive within the server's body timeout."""


class TransportError(FTRLPSError, ConnectionError):
    """The client could not reach the server or the connection broke."""


class UpdatesLostError(FTRLPSError):
    """A shard lacks pushes that the worker's journal no longer holds (e.g. it
    restarted without a checkpoint): the model would silently miss updates."""


class ClusterError(FTRLPSError):
    """A process of the local cluster failed."""


class StartupTimeoutError(FTRLPSError, TimeoutError):
    """What a process needs before it starts (servers answering, input files)
    did not appear within its start-up timeout."""


class IncompleteRunError(FTRLPSError):
    """A cluster run ended without every configured worker finishing its share
    (some never registered, or died and were not replaced)."""
