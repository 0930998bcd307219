"""warren: Python SDK for the warren sandbox daemon (``warrend``).

Quick start::

    from warren import Sandbox

    with Sandbox.create(image="busybox", timeout=600) as sb:
        r = sb.commands.run("echo hello; echo oops >&2; exit 3")
        print(r.exit_code, r.stdout, r.stderr)      # 3 'hello\\n' 'oops\\n'
        sb.files.write("/tmp/data.bin", b"\\x00\\x01")
        print(sb.files.read("/tmp/data.bin", format="bytes"))

One-off sandboxed calls on warm zygotes: :mod:`warren.functions`
(``warren.functions.call(image, argv)``, ``call(image, code=..., language="python")``,
``batch([...])``, and ``acall``/``abatch`` for asyncio).

:class:`AsyncSandbox` offers the same API with coroutines. Errors are typed
(:class:`WarrenError` and subclasses, one per API error code).
"""
__version__ = "0.1.0"

from ._http import (ConnectionConfig, aclose_shared_clients,  # noqa: E402
                    close_shared_clients)
from .exceptions import (AuthenticationError, CommandExitError,  # noqa: E402
                         CommandExitException, ConflictError, InternalError,
                         InvalidArgumentError, MethodNotAllowedError, NotFoundError,
                         PayloadTooLargeError, PermissionDeniedError, RequestTimeoutError,
                         ResourceExhaustedError,
                         UnavailableError, UnsupportedMediaTypeError, WarrenConnectionError,
                         WarrenError)
from .models import (CommandInfo, CommandResult, EntryInfo, Event, FileType,  # noqa: E402
                     SandboxInfo, UploadResult)
from . import images  # noqa: E402
from . import registry  # noqa: E402
from .images import AsyncImages, ImageInfo, Images  # noqa: E402
from .lease import AsyncLease, Lease, LeaseInfo  # noqa: E402
from .network import AsyncNetwork, Network  # noqa: E402
from .ports import AsyncPorts, PortInfo, Ports  # noqa: E402
from .pty import AsyncPty, AsyncPtyHandle, Pty, PtyHandle  # noqa: E402
from .sandbox import ByteStream, CommandHandle, Commands, Files, Sandbox  # noqa: E402
from .sandbox_async import (AsyncByteStream, AsyncCommandHandle, AsyncCommands,  # noqa: E402
                            AsyncFiles, AsyncSandbox)
from . import functions  # noqa: E402
from . import events  # noqa: E402
from .events import AsyncEvents, AuditEvent, Events  # noqa: E402

__all__ = [
    "__version__", "functions", "events", "Events", "AsyncEvents", "AuditEvent",
    "Sandbox", "AsyncSandbox", "Lease", "AsyncLease", "LeaseInfo",
    "Ports", "AsyncPorts", "PortInfo",
    "Commands", "AsyncCommands", "CommandHandle", "AsyncCommandHandle",
    "Files", "AsyncFiles", "ByteStream", "AsyncByteStream",
    "Pty", "AsyncPty", "PtyHandle", "AsyncPtyHandle",
    "SandboxInfo", "CommandResult", "CommandInfo", "EntryInfo", "FileType", "Event",
    "UploadResult", "ConnectionConfig",
    "images", "Images", "AsyncImages", "ImageInfo", "registry",
    "close_shared_clients", "aclose_shared_clients",
    "WarrenError", "InvalidArgumentError", "AuthenticationError", "PermissionDeniedError",
    "NotFoundError",
    "MethodNotAllowedError", "ConflictError", "PayloadTooLargeError",
    "UnsupportedMediaTypeError", "ResourceExhaustedError", "InternalError",
    "UnavailableError", "WarrenConnectionError", "RequestTimeoutError",
    "CommandExitError", "CommandExitException",
]
