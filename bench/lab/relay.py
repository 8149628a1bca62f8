"""A delaying TCP relay for a kernel without `tc netem` (CONFIG_NET_SCH_NETEM unset): run on an
agent's host, it passes the agent's connections on to the internal listener (TLS and all,
byte for byte) and holds every chunk, each way, for a delay drawn from N(delay, jitter),
never reordering. The link's packet loss is nft's (`bench/lab/net.py`).

    python -m bench.lab.relay --listen 10.213.0.31:9443 --upstream 10.213.0.10:8443 --delay-ms 50 --jitter-ms 20
"""

import argparse
import asyncio
import random
import time


async def pipe(reader, writer, delay_s: float, jitter_s: float):
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver():
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if chunk is None:
                break
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(deliver())
    last_due = 0.0
    try:
        while chunk := await reader.read(65536):
            # In order: a chunk never leaves before the one ahead of it.
            last_due = max(last_due, time.monotonic() + max(0.0, random.gauss(delay_s, jitter_s)))
            queue.put_nowait((last_due, chunk))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((last_due, None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--delay-ms", type=float, default=50)
    parser.add_argument("--jitter-ms", type=float, default=20)
    args = parser.parse_args()
    delay, jitter = args.delay_ms / 1000, args.jitter_ms / 1000
    up_host, up_port = args.upstream.rsplit(":", 1)

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(up_host, int(up_port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer, delay, jitter),
                             pipe(server_reader, client_writer, delay, jitter))

    async def serve():
        host, port = args.listen.rsplit(":", 1)
        server = await asyncio.start_server(handle, host, int(port))
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
