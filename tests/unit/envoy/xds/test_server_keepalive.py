"""The xDS server tolerates Envoy's HTTP/2 keepalive pings (every 30 s) on a long idle stream.

gRPC's defaults count a ping more often than every 5 minutes as abuse and close the
connection after two (GOAWAY "too_many_pings"): an idle ADS stream was "closed" every ~2
minutes. Here a client pings in quick succession and every ping is answered.
"""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events

from podway.envoy.xds.cache import Cache
from podway.envoy.xds.server import XdsServer


async def test_pings_never_close_the_connection() -> None:
    """Eight pings in a row: eight answers, no GOAWAY."""
    server = XdsServer(Cache(), "127.0.0.1:0", unauthenticated=True)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        acks, goaway = 0, False
        async with asyncio.timeout(20):
            for i in range(8):
                conn.ping(i.to_bytes(8, "big"))
                writer.write(conn.data_to_send())
                answered = False
                while not answered and not goaway:
                    data = await reader.read(65536)
                    if not data:
                        goaway = True
                        break
                    for event in conn.receive_data(data):
                        if isinstance(event, h2.events.PingAckReceived):
                            acks, answered = acks + 1, True
                        elif isinstance(event, h2.events.ConnectionTerminated):
                            goaway = True
                    writer.write(conn.data_to_send())
                if goaway:
                    break
        writer.close()
        assert (acks, goaway) == (8, False)
    finally:
        await server.stop(0)
