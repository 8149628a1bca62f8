"""ASGI entry point (`uvicorn kece.asgi:application`).

Handles the lifespan protocol so that, in the embedded default, the web process starts the
in-process scheduler (reaper, event dispatcher, status snapshot) and stops it cleanly.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kece.settings")

django_application = get_asgi_application()


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        from kece.lifespan import serve_lifespan

        await serve_lifespan(receive, send)
        return
    await django_application(scope, receive, send)
