"""moto's server for the AWS tests, with one change: requests are handled one at a time.

`moto_server` serves every request on its own thread, and moto's SQS and DynamoDB models take no
locks: two concurrent ReceiveMessage calls can both pass a FIFO group's "in flight" check (seen as
a group delivered out of order), and two conditional writes can both pass their condition. Real
SQS and DynamoDB are atomic there, and the tests check exactly those guarantees, so this runs
moto's own WSGI app behind one lock. Connections are still served on threads (HTTP/1.1 keep-alive
keeps working); only moto's handling of each request is serialised.

Usage: python moto_server.py HOST PORT
"""

import sys
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def serialised(environ, start_response):
        with lock:
            # Build the whole response inside the lock: the body may be computed lazily.
            return list(app(environ, start_response))

    run_simple(
        host,
        port,
        serialised,
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
