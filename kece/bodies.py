"""One request-body limit for every HTTP path, pages included: `DATA_UPLOAD_MAX_MEMORY_SIZE`
(1 MiB, the contract's figure; the Compose proxy's `client_max_body_size` is the same).

It is enforced in front of the whole ASGI application, before anything reads the body: a body
declared larger (Content-Length) is answered at once without reading a byte of it, and a
chunked one as soon as the bytes received pass the limit, so no request can make the server
buffer or spool more than the limit. The answer is 413 in the contract's envelope
(`{"error": "too_large", "detail": …}`), on the API and the pages alike.

Nothing the site takes needs more: a submission's code is at most 256 KiB
(`judging.services.submit.MAX_SOURCE_BYTES`), three times that URL-encoded from a page's
form; exam and console forms are a few fields; problems are imported from the command line.
"""

from django.conf import settings

from judging.api.bare import send_json
from kece.errors import TooLarge


def declared_length(scope) -> int:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def refusing_past(receive, limit: int):
    """`receive`, raising TooLarge once the body has passed `limit` bytes (no more is read)."""
    received = 0

    async def receive_within_limit():
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise TooLarge(f"The body is larger than {limit} bytes.")
        return message

    return receive_within_limit


def limit_request_bodies(app):
    """`app` (ASGI) with every HTTP request body held to the limit."""

    async def limited(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if declared_length(scope) > limit:
            error = TooLarge(f"The body is larger than {limit} bytes.")
            return await send_json(send, error.status, error.envelope())
        started = False

        async def send_noting_start(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, refusing_past(receive, limit), send_noting_start)
        except TooLarge as error:
            if started:  # the application answered already; the body it did not need is dropped
                raise
            await send_json(send, error.status, error.envelope())

    return limited
