"""Run the API in one process, or in several that each bind the port with ``SO_REUSEPORT``.

With one listening socket shared by several processes, a burst of new connections goes to
whichever process wakes first, and long-lived keep-alive connections then stay unevenly spread.
With a socket per process and ``SO_REUSEPORT`` the kernel spreads connections over the processes.
The parent only supervises: SIGTERM/SIGINT stop every process, and when one process exits the
others are stopped too, so that the orchestrator sees the failure and restarts the service.
"""

from __future__ import annotations

import multiprocessing
import signal
import socket
from multiprocessing.connection import wait
from types import FrameType

from app.settings import Settings

STOP_GRACE_SECONDS = 30


def serve_api(settings: Settings, host: str, port: int, workers: int = 1) -> int:
    """Serve until stopped; the exit status of the process group."""
    if workers <= 1:
        _serve_process(settings, host, port, reuse_port=False)
        return 0
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=_serve_process, args=(settings, host, port, True), name=f"api-{number}"
        )
        for number in range(workers)
    ]
    for process in processes:
        process.start()

    def stop(signum: int, _frame: FrameType | None) -> None:
        for process in processes:
            if process.is_alive():
                process.terminate()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        wait([process.sentinel for process in processes])  # the first one to end
        stop(signal.SIGTERM, None)
        for process in processes:
            process.join(STOP_GRACE_SECONDS)
            if process.is_alive():
                process.kill()
                process.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max((abs(process.exitcode or 0) for process in processes), default=0)


def _serve_process(settings: Settings, host: str, port: int, reuse_port: bool) -> None:
    import uvicorn

    from app.main import create_app
    from app.observability.logs import configure_logging

    # One JSON object per line (RECYCLE_LOG_FORMAT=text for people); uvicorn's own access log
    # is replaced by app.access lines that carry the request id.
    configure_logging(settings.log_format, settings.log_level)
    app = create_app(settings)
    if not reuse_port:
        uvicorn.run(app, host=host, port=port, log_config=None, access_log=False)
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind((host, port))
    config = uvicorn.Config(app, log_config=None, access_log=False)
    uvicorn.Server(config).run(sockets=[listener])
