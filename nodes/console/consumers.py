"""`/ws/admin/judgers`: the console's live channel, for admins only.

The server only ever says which pools changed (or, while nothing does, that it is alive:
`live.KEEPALIVE_INTERVALS`); the page re-fetches its parts. Messages to
one page are coalesced: at most one per `KECE_CONSOLE_PUBLISH_MS`, carrying every pool that
changed meanwhile, so a burst of changes costs a page one refresh.

Who may listen is checked at the connect and again every `KECE_CONSOLE_PUBLISH_MS` from the
session itself: an admin signed out (or whose session was flushed), deactivated or no longer
holding `nodes.manage_judgers` loses the socket within one interval. Each check that passes
marks the console as watched (`live.mark_watched`): the publish step works only while some
page listens. Each also adds the socket to the group again: a Redis failover may lose what
the old primary had not passed on to its replica, the membership included.

The page is told it is live as soon as the socket is accepted, and the first check runs at
once beside it. The checks, the connect's among them, run on the administrators' lane
(`kece.lanes`), not on the one thread the process shares for every other synchronous call
(Django's request signals, channels' own session lookups): behind a queue there, or a Redis call waiting out a failover,
a new socket heard nothing at all, not even that it was live. A consumer that ends without
its disconnect (its channel layer failing under it) stops its tasks all the same.
"""

import asyncio
import logging

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from kece.lanes import ADMIN as ADMIN_LANE
from kece.permissions import can_manage_judgers, session_manages_judgers
from nodes.console import live

logger = logging.getLogger(__name__)

# Close code for a refused socket (4000–4999 are the application's): the page keeps trying
# with a backoff, and is refused until an admin signs in again.
REFUSED = 4403
# Close code when the standing could not be checked (the database unreachable): the page
# reconnects, and the connect checks again.
UNCHECKED = 1011


def _standing_while_watching(session_key: str | None) -> bool:
    """Whether the session may still listen; if so, the page is marked as listening (one
    hop for both, each publish interval)."""
    allowed = session_manages_judgers(session_key)
    if allowed:
        live.mark_watched()
    return allowed


class JudgersConsumer(AsyncJsonWebsocketConsumer):
    flush: asyncio.Task | None = None
    watch: asyncio.Task | None = None
    joined = False

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._leave()

    async def connect(self):
        self.pending: set[str] = set()
        self.last_sent = float("-inf")
        if not await ADMIN_LANE.run(can_manage_judgers, self.scope.get("user")):
            await self.close(code=REFUSED)
            return
        live.remember_consumer_loop(asyncio.get_running_loop())
        try:
            await self.channel_layer.group_add(live.GROUP, self.channel_name)
        except Exception:
            # Redis unreachable (down, or failing over to a replica): refused, not a 500; the
            # page tries again with its backoff.
            logger.warning("the console socket could not join its group", exc_info=True)
            await self.close(code=UNCHECKED)
            return
        self.joined = True
        await self.accept()
        await self._tell({"type": "live", "silentAfterMs": live.silent_after_ms()})
        self.watch = asyncio.create_task(self._watch_standing(self.scope["session"].session_key))

    async def _watch_standing(self, session_key: str | None):
        interval = settings.KECE_CONSOLE_PUBLISH_MS / 1000
        while True:
            try:
                allowed = await ADMIN_LANE.run(_standing_while_watching, session_key)
            except Exception:
                logger.exception("the console socket's session could not be checked")
                await self.close(code=UNCHECKED)
                return
            if not allowed:
                await self.close(code=REFUSED)
                return
            try:
                await self.channel_layer.group_add(live.GROUP, self.channel_name)
            except Exception as exc:
                # Tried again at the next check: the socket stays open meanwhile.
                logger.warning("the console socket could not rejoin its group", extra={"error": str(exc)})
            await asyncio.sleep(interval)

    async def disconnect(self, code):
        await self._leave()

    async def _leave(self):
        for task in (self.flush, self.watch):
            if task is not None:
                task.cancel()
        self.flush = self.watch = None
        if self.joined:
            self.joined = False
            try:
                await self.channel_layer.group_discard(live.GROUP, self.channel_name)
            except Exception as exc:
                # Its entry lapses with the group's expiry; nothing is sent to a gone socket.
                logger.warning("the console socket could not leave its group", extra={"error": str(exc)})

    async def fleet_changed(self, event):
        self.pending.update(event.get("pools") or [])
        if self.flush is None:
            interval = settings.KECE_CONSOLE_PUBLISH_MS / 1000
            delay = max(0.0, self.last_sent + interval - asyncio.get_running_loop().time())
            self.flush = asyncio.create_task(self._send_after(delay))

    async def _send_after(self, delay: float):
        await asyncio.sleep(delay)
        pools, self.pending, self.flush = sorted(self.pending), set(), None
        self.last_sent = asyncio.get_running_loop().time()
        await self._tell({"type": "changed", "pools": pools})

    async def fleet_alive(self, event):
        if self.flush is None:  # a change on its way says as much
            await self._tell({"type": "alive"})

    async def _tell(self, message: dict):
        """Send, unless the page has just left (a link followed): the server then refuses the
        write, as closed (uvicorn's RuntimeError) or as lost (its ClientDisconnected, an
        OSError), before channels has handed this consumer the disconnect on its way."""
        try:
            await self.send_json(message)
        except OSError as exc:
            logger.debug("the console socket was gone before a message", extra={"error": str(exc)})
        except RuntimeError as exc:
            if "after sending 'websocket.close'" not in str(exc):
                raise
            logger.debug("the console socket closed before a message", extra={"error": str(exc)})

    async def receive_json(self, content, **kwargs):
        pass  # the page has nothing to say
