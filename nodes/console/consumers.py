"""`/ws/admin/judgers`: the console's live channel, for admins only.

The server only ever says which pools changed; the page re-fetches its parts. Messages to
one page are coalesced: at most one per `KECE_CONSOLE_PUBLISH_MS`, carrying every pool that
changed meanwhile, so a burst of changes costs a page one refresh.
"""

import asyncio

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from kece.permissions import can_manage_judgers
from nodes.console import live

# Close code for a refused socket (4000–4999 are the application's); the page then stops
# reconnecting, since signing in again is what it needs.
REFUSED = 4403


class JudgersConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.pending: set[str] = set()
        self.flush: asyncio.Task | None = None
        self.last_sent = float("-inf")
        if not await database_sync_to_async(can_manage_judgers)(self.scope.get("user")):
            await self.close(code=REFUSED)
            return
        live.remember_consumer_loop(asyncio.get_running_loop())
        await self.channel_layer.group_add(live.GROUP, self.channel_name)
        await self.accept()
        await self.send_json({"type": "live"})

    async def disconnect(self, code):
        if self.flush is not None:
            self.flush.cancel()
        await self.channel_layer.group_discard(live.GROUP, self.channel_name)

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
        await self.send_json({"type": "changed", "pools": pools})

    async def receive_json(self, content, **kwargs):
        pass  # the page has nothing to say
